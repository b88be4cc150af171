-- What is left of a lock's lock-delay: how long a free lock stays unavailable to relock acquires
-- with a lock-delay because its last holder's lease ran out without an unlock.
-- Needs: common/counter, common/delay
--
-- KEYS[1]  the lock hash <name>
-- KEYS[2]  the shadow lease relock_lease:{<name>} (lua/common/delay.lua)
--
-- Reply:   the delay left in ms, or 0 when none is in force (the lock is held, or free and not
--          delayed).
-- Errors:  WRONGTYPE ... [key <i>] when KEYS[i] holds another type.
delay_check(2)
if on_key(1, 'exists') == 1 then
    return 0
end
return delay_left(2)
