-- Reads a counter: a semaphore's available permits or a latch's remaining count.
-- Needs: common/counter
-- Flags: no-writes
--
-- KEYS[1]  the counter <name>
--
-- Reply:   the count, or nil when the key does not exist.
-- Errors:  WRONGTYPE ... [key 1] when <name> holds another type or a string that is not a count.
return counter_read(1)
