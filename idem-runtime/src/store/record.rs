//! One key's record as stores keep it (contract S1, U1, U6): its owner token, its state, and
//! where a saved outcome came from.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::Fingerprint;
use crate::label::RecordLabel;

/// The random token that identifies one claim's owner; fences stale owners (S6).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerToken(u128);

impl OwnerToken {
    /// A fresh random token (122 random bits, UUID v4).
    pub fn random() -> Self {
        OwnerToken(uuid::Uuid::new_v4().as_u128())
    }

    /// The token as a number, for stores that keep it in a column.
    pub fn as_u128(self) -> u128 {
        self.0
    }

    /// A token read back from a store.
    pub fn from_u128(raw: u128) -> Self {
        OwnerToken(raw)
    }

    /// The token's stored text: exactly 32 lower-case hex digits.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// Decodes a token stored as text, strictly: exactly 32 lower-case hex digits (the
    /// form [`to_hex`](Self::to_hex) writes), so that the decoded token written back
    /// compares equal to the stored text. Anything else (upper case, a sign, other
    /// lengths) is `None`, which stores report as a corrupt record (S10).
    pub fn from_hex(text: &str) -> Option<Self> {
        let canonical = text.len() == 32
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        canonical
            .then(|| u128::from_str_radix(text, 16).ok())
            .flatten()
            .map(OwnerToken)
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({:032x})", self.0)
    }
}

/// One key's stored state (S1). A completed record whose `expires_at` is at or before
/// "now" is expired and behaves as absent; a record that is not completed does not expire
/// (S8): see [`Record::is_live`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Fingerprint of the arguments that claimed the key (S9).
    pub fingerprint: Fingerprint,
    /// When the execution that owns (or owned) the record claimed it.
    pub created_at: Timestamp,
    /// `created_at + ttl` (raised by renewals, L1, and by decisions, U6): a completed
    /// record is live while now < `expires_at` and expired from that instant (S8); a
    /// record that is not completed stays live past it, *overdue*.
    pub expires_at: Timestamp,
    /// The fencing token of the claim or takeover that owns (or owned) the record: 1 for
    /// the first claim of a key the store does not hold, and one more than the stored
    /// record's for every later claim (of an expired record) and takeover (F1).
    pub fence: u64,
    /// In progress, outcome unknown, completed, or not applied.
    pub state: RecordState,
    /// What the record says about its call (P1): tool, namespace, scope. `None` for a
    /// record written before labels existed (P4); such a record replays as any other.
    pub label: Option<RecordLabel>,
}

impl Record {
    /// Whether the record is live at `now` (S8): a completed record until its
    /// `expires_at`, any other record until something moves it on.
    pub fn is_live(&self, now: Timestamp) -> bool {
        !matches!(self.state, RecordState::Completed { .. }) || now < self.expires_at
    }

    /// Whether the record is live at `now` only because it is not completed: its
    /// `expires_at` passed and it waits for a call, a decision or a purge (S8, I7).
    pub fn is_overdue(&self, now: Timestamp) -> bool {
        !matches!(self.state, RecordState::Completed { .. }) && now >= self.expires_at
    }
}

/// The live states of a record (S1, U1, U6).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordState {
    /// A caller holds the claim and is running the body, renewing its lease (L1).
    InProgress {
        /// Who holds the claim.
        owner: OwnerToken,
        /// When the claim lapses unless renewed: from this instant another caller may take
        /// over (S6, L1).
        lease_until: Timestamp,
    },
    /// The owner gave up without an outcome (its body was cancelled, panicked, or ended
    /// with "outcome unknown"; or a reconcile function could not tell), or a call found its
    /// lease lapsed: whether the effect happened is unknown (U1). Nobody renews the lease.
    /// A tool with a reconcile function takes the record over at once and reconciles (U3);
    /// any other call gets [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown): until
    /// a person decides (U2, U6), or, with `on_unknown = "rerun"`, until `lease_until`,
    /// after which the next call takes over and runs the body again (U2a).
    OutcomeUnknown {
        /// The owner that gave up.
        owner: OwnerToken,
        /// When the held claim lapses (the owner's last lease deadline).
        lease_until: Timestamp,
        /// When the run whose outcome is unknown claimed the key (kept across
        /// reconciliations that could not tell).
        since: Timestamp,
    },
    /// The outcome is saved.
    Completed {
        /// The saved outcome (S11).
        outcome: Envelope,
        /// When the outcome was saved.
        completed_at: Timestamp,
        /// Where it came from: the body, a reconcile function, or a person (U6).
        source: OutcomeSource,
    },
    /// A person decided that the effect of the key's unknown outcome did not happen (U6):
    /// the next call with the same fingerprint claims the key with the next fence and runs
    /// the body. Never expires (S8).
    NotApplied {
        /// When the decision was recorded (the decider's clock).
        decided_at: Timestamp,
    },
    /// The first call of a tool that requires approval recorded its request (A2): every
    /// call with the same fingerprint gets
    /// [`Error::AwaitingApproval`](crate::Error::AwaitingApproval) until a person approves
    /// or denies it (A3). No owner, no lease; never expires (S8).
    AwaitingApproval {
        /// Since when: the request, or the call that found the approval expired (A4).
        since: Timestamp,
    },
    /// A person approved the call (A3): the next call with the same fingerprint before
    /// `until` takes the record over with the next fence and runs the body once (A4).
    /// Never expires (S8); a call after `until` moves it back to awaiting approval.
    Approved {
        /// When the approval was recorded (the decider's clock).
        decided_at: Timestamp,
        /// When it expires.
        until: Timestamp,
    },
}

impl RecordState {
    /// Whether the state is an unknown outcome at `now` (U1, I7): marked so, or in
    /// progress with a lease that lapsed at or before `now`.
    pub fn is_unknown_at(&self, now: Timestamp) -> bool {
        match self {
            RecordState::OutcomeUnknown { .. } => true,
            RecordState::InProgress { lease_until, .. } => *lease_until <= now,
            _ => false,
        }
    }
}

/// Where a saved outcome came from (S1, U3, U6): the record says it, and so does every
/// call that gets it ([`CallRecord::source`](crate::CallRecord::source)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutcomeSource {
    /// The body returned it (and records written before sources were kept, P4).
    #[default]
    Executed,
    /// A reconcile function found the effect had happened and gave it (U3).
    Reconciled,
    /// A person decided it (`idem resolve`, [`Engine::resolve`](crate::Engine::resolve), U6).
    Resolved,
    /// A person denied the call (`idem deny`, [`Engine::deny`](crate::Engine::deny), A3):
    /// the outcome is the denial (actor, note), replayed as
    /// [`Error::Denied`](crate::Error::Denied) (A5).
    Denied,
}

impl OutcomeSource {
    /// `executed`, `reconciled`, `resolved`, `denied`: the name stores keep and output
    /// shows.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeSource::Executed => "executed",
            OutcomeSource::Reconciled => "reconciled",
            OutcomeSource::Resolved => "resolved",
            OutcomeSource::Denied => "denied",
        }
    }

    /// The source named `text` ([`as_str`](Self::as_str)), if any.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "executed" => OutcomeSource::Executed,
            "reconciled" => OutcomeSource::Reconciled,
            "resolved" => OutcomeSource::Resolved,
            "denied" => OutcomeSource::Denied,
            _ => return None,
        })
    }
}

/// A person's denial as a record saves it (A3, A5): the `err` member of the key's outcome
/// envelope, `{"denied":{"actor":"ana","at":1796000000000,"note":"…"}}`, with source
/// [`OutcomeSource::Denied`]. Every call of the key replays it as
/// [`Error::Denied`](crate::Error::Denied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    /// Who denied the call.
    pub actor: String,
    /// When (ms since the Unix epoch, the decider's clock).
    pub at: Timestamp,
    /// Why, in their words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The saved form of a [`Denial`]: one member naming what it is.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum SavedDenial {
    Denied(Denial),
}

impl Denial {
    /// The outcome envelope that saves this denial.
    pub fn to_envelope(&self) -> Envelope {
        // Strings, an option and an integer always encode.
        Envelope::encode_err(&SavedDenial::Denied(self.clone()))
            .unwrap_or_else(|_| Envelope::from_stored("{\"version\":1,\"err\":{\"denied\":{}}}"))
    }

    /// The denial an outcome envelope saves.
    ///
    /// # Errors
    /// What is wrong, when `outcome` is not a saved denial.
    pub fn from_envelope(outcome: &Envelope) -> Result<Denial, String> {
        match outcome.decode::<serde_json::Value, SavedDenial>()? {
            Err(SavedDenial::Denied(denial)) => Ok(denial),
            Ok(_) => Err("a denial saved as a success".to_owned()),
        }
    }
}
