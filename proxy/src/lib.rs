//! # moonbridge-proxy
//!
//! The MoonBridge proxy daemon as a library: [`config::Config`] describes listeners (`tcp`, `ws`, `wss`),
//! backends, routing, authentication and limits; [`Server::bind`] opens the listeners and [`Server::run`]
//! serves players until a shutdown signal. The `moonbridge` binary is a thin command line around these calls.

mod auth;
pub mod config;
mod limits;
mod proxy_header;
mod relay;
mod server;
mod session;
pub mod tls;
mod ws;

pub use auth::AuthError;
pub use config::Config;
pub use server::{Server, ServerError, ServerStats, StatsHandle};
