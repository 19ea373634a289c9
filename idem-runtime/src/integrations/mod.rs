//! Integrations with agent frameworks and SDKs, each behind its own cargo feature (off by
//! default), each in its own module.

#[cfg(feature = "async-openai")]
pub mod async_openai;

#[cfg(feature = "genai")]
pub mod genai;

#[cfg(feature = "rig")]
pub mod rig;

#[cfg(feature = "rmcp")]
pub mod rmcp;
