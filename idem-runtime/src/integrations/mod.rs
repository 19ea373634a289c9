#[cfg(feature = "rig")]
pub mod rig;
