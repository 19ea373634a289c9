//! Typed integrations with other crates, each behind its own cargo feature (off by default).

#[cfg(feature = "async-openai")]
pub mod async_openai;

#[cfg(feature = "genai")]
pub mod genai;
