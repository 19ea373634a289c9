// pins C4: methods on `&self`, `&mut self` and `self`; the receiver is never in the key.
#![deny(warnings)]

use idem_agent::{idempotent, ToolError};
use serde::{Deserialize, Serialize};

pub struct Bank {
    refunds: u32,
}

#[derive(Serialize, Deserialize)]
pub struct Wrapper<T>(pub T);

impl Serialize for Bank {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.refunds.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Bank {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Bank { refunds: u32::deserialize(d)? })
    }
}

#[derive(Serialize, Deserialize)]
pub struct Account {
    pub id: u64,
}

impl Bank {
    #[idempotent(scope = "global")]
    pub fn balance(&self, account: u64) -> Result<u64, ToolError> {
        Ok(account + u64::from(self.refunds))
    }

    #[idempotent(scope = "global")]
    pub fn refund(&mut self, order: &str) -> Result<u32, ToolError> {
        let _ = order;
        self.refunds += 1;
        Ok(self.refunds)
    }

    #[idempotent(scope = "global")]
    pub async fn refund_later(&mut self, order: &str) -> Result<u32, ToolError> {
        let _ = order;
        self.refunds += 1;
        Ok(self.refunds)
    }

    #[idempotent(scope = "global")]
    pub fn close(self, reason: String) -> Result<String, ToolError> {
        Ok(format!("{reason}:{}", self.refunds))
    }

    /// `Self` only in the body: the signature looks free, so `dispatch = false`.
    #[idempotent(scope = "global", dispatch = false)]
    pub fn open(id: u64) -> Result<Account, ToolError> {
        Self::make(id)
    }

    fn make(id: u64) -> Result<Account, ToolError> {
        Ok(Account { id })
    }

    /// `Self` in the signature: no companion.
    #[idempotent(scope = "global")]
    pub fn with_refunds(refunds: u32) -> Result<Wrapper<Self>, ToolError> {
        Ok(Wrapper(Bank { refunds }))
    }

    /// An associated fn without receiver nor `Self` needs `dispatch = false`.
    #[idempotent(scope = "global", dispatch = false)]
    pub fn rate(currency: String) -> Result<f64, ToolError> {
        Ok(if currency == "EUR" { 1.0 } else { 1.1 })
    }
}

impl Account {
    #[idempotent(scope = "global")]
    pub fn renamed(&self, name: String) -> Result<Self, ToolError> {
        Ok(Account { id: self.id + name.len() as u64 })
    }
}

pub trait Refunds {
    fn refund_all(&self, reason: String) -> Result<u32, ToolError>;
}

impl Refunds for Bank {
    #[idempotent(scope = "global")]
    fn refund_all(&self, reason: String) -> Result<u32, ToolError> {
        Ok(reason.len() as u32 + self.refunds)
    }
}

fn main() {
    let mut bank = Bank { refunds: 0 };
    let _ = bank.balance(1);
    let _ = bank.refund("o1");
    let _ = Bank::with_refunds(1);
    let _ = Bank::open(1).and_then(|a| a.renamed("n".into()));
    let _ = Bank::rate("EUR".into());
    let _ = bank.refund_all("r".into());
    let _ = bank.refund_later("o1");
    let _ = bank.close("done".into());
}
