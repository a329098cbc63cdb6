//! The handle registry shared by the two foreign boundaries, [`crate::ffi`] (C) and `jni` (Java).
//!
//! A handle is an opaque number mapped to a [`Connection`]; it is looked up on every call and never
//! dereferenced, so a stale, closed or forged handle is an [`ClientError::InvalidArgument`], not a crash.
//! Handles count up in steps of 2 from `0x4d42_0001` (odd, never 0, never a plausible pointer) and are not
//! reused while the process lives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::{ClientError, Connection};

type Registry = Mutex<HashMap<usize, Arc<Connection>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// The next handle.
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x4d42_0001);

/// Registers a connection and returns its handle.
pub(crate) fn register(conn: Connection) -> usize {
    let handle = NEXT_HANDLE.fetch_add(2, Ordering::Relaxed);
    registry().lock().unwrap_or_else(PoisonError::into_inner).insert(handle, Arc::new(conn));
    handle
}

/// The connection behind a handle.
///
/// # Errors
/// [`ClientError::InvalidArgument`] for an unknown or closed handle.
pub(crate) fn lookup(handle: usize) -> Result<Arc<Connection>, ClientError> {
    registry()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&handle)
        .cloned()
        .ok_or_else(|| ClientError::InvalidArgument(format!("unknown or closed connection handle {handle:#x}")))
}

/// Removes a handle; the connection closes when its last in-flight call returns.
pub(crate) fn unregister(handle: usize) -> Option<Arc<Connection>> {
    registry().lock().unwrap_or_else(PoisonError::into_inner).remove(&handle)
}

/// The text of a panic payload, for the error both boundaries report instead of unwinding.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("panic in moonbridge-client: {text}")
}
