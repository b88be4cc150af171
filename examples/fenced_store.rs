//! Fencing a store outside Redis: a SQL table that keeps the highest fencing token it has seen in
//! a `fence_token` column and makes every write conditional on it, as `relock::Fence` does for
//! data in Redis.
//!
//! ```sql
//! -- a fenced write: 1 row updated, or 0 when the token is stale
//! UPDATE accounts SET balance = $balance, fence_token = $token
//!  WHERE id = $id AND fence_token <= $token;
//! -- a fenced read: the same condition, recording the token
//! UPDATE accounts SET fence_token = $token
//!  WHERE id = $id AND fence_token <= $token RETURNING balance;
//! ```
//!
//! The table here is simulated in-process (a row behind a mutex that applies exactly that rule),
//! so the example needs no database and no Redis. The tokens are plain numbers, as a
//! `FencedLock` hands them out: each new holder of the lock gets one higher than the last.
//!
//! Holder A (token 5) reads the balance and stalls past its lease; holder B (token 6) takes the
//! lock, reads and writes; A wakes and writes what it computed from its old read. The table
//! refuses A's write, so B's update stands.
//!
//! Run with `cargo run --example fenced_store`.

use std::collections::HashMap;
use std::sync::Mutex;

/// One row of `accounts`: the data and the highest token that has used it.
#[derive(Debug, Clone, Copy)]
struct Row {
    balance: i64,
    fence_token: u64,
}

/// The `accounts` table, with the two fenced statements as methods. The mutex makes each
/// statement atomic, as the database does: the condition and the update are one step.
#[derive(Default)]
struct Accounts {
    rows: Mutex<HashMap<u64, Row>>,
}

impl Accounts {
    /// `INSERT INTO accounts (id, balance, fence_token) VALUES ($id, $balance, 0)`.
    fn insert(&self, id: u64, balance: i64) {
        let row = Row {
            balance,
            fence_token: 0,
        };
        self.rows.lock().unwrap().insert(id, row);
    }

    /// `UPDATE accounts SET balance = $balance, fence_token = $token
    ///  WHERE id = $id AND fence_token <= $token`: the number of rows updated.
    fn update(&self, id: u64, balance: i64, token: u64) -> usize {
        let mut rows = self.rows.lock().unwrap();
        match rows.get_mut(&id) {
            Some(row) if row.fence_token <= token => {
                *row = Row {
                    balance,
                    fence_token: token,
                };
                1
            }
            _ => 0,
        }
    }

    /// `UPDATE accounts SET fence_token = $token
    ///  WHERE id = $id AND fence_token <= $token RETURNING balance`: the balance, or `None` when
    /// the token is stale (or there is no such row).
    fn read(&self, id: u64, token: u64) -> Option<i64> {
        let mut rows = self.rows.lock().unwrap();
        match rows.get_mut(&id) {
            Some(row) if row.fence_token <= token => {
                row.fence_token = token;
                Some(row.balance)
            }
            _ => None,
        }
    }

    fn row(&self, id: u64) -> Row {
        self.rows.lock().unwrap()[&id]
    }
}

/// A holder of the lock on account `id`, with the token it got when it took the lock.
struct Holder {
    name: &'static str,
    token: u64,
}

impl Holder {
    /// Reads the balance through the fence.
    fn read(&self, accounts: &Accounts, id: u64) -> Option<i64> {
        let balance = accounts.read(id, self.token);
        match balance {
            Some(balance) => println!("{} (token {}) reads {balance}", self.name, self.token),
            None => println!("{} (token {}) read refused: stale", self.name, self.token),
        }
        balance
    }

    /// Writes `balance` through the fence: `true` when the row took it.
    fn write(&self, accounts: &Accounts, id: u64, balance: i64) -> bool {
        let updated = accounts.update(id, balance, self.token);
        if updated == 1 {
            println!("{} (token {}) writes {balance}", self.name, self.token);
        } else {
            println!(
                "{} (token {}) write of {balance} refused: 0 rows updated, a newer holder has \
                 used the row (fence_token is now {})",
                self.name,
                self.token,
                accounts.row(id).fence_token
            );
        }
        updated == 1
    }
}

fn main() {
    let accounts = Accounts::default();
    let id = 42;
    accounts.insert(id, 100);

    let a = Holder {
        name: "A",
        token: 5,
    };
    let b = Holder {
        name: "B",
        token: 6,
    };

    // A holds the lock, reads, and stalls (a GC pause, a stopped VM) past its lease.
    let a_read = a.read(&accounts, id).expect("A's token is the newest");
    println!(
        "A stalls; its lease runs out and B takes the lock with token {}",
        b.token
    );

    // B reads through the fence, which records token 6 before B computes anything...
    let b_read = b.read(&accounts, id).expect("B's token is the newest");
    // ...so A's late write, computed from its old read, is refused whenever it lands.
    let a_wrote = a.write(&accounts, id, a_read + 10);
    let b_wrote = b.write(&accounts, id, b_read + 20);

    let row = accounts.row(id);
    println!(
        "account {id}: balance {}, fence_token {}",
        row.balance, row.fence_token
    );
    assert!(!a_wrote && b_wrote);
    assert_eq!((row.balance, row.fence_token), (120, 6));

    // A, told its write was refused, knows its lease is over: it must not retry with token 5,
    // which every later statement refuses too.
    assert_eq!(a.read(&accounts, id), None);
}
