#[cfg(feature = "rmcp")]
pub mod rmcp;
