//! JNI exports for `dev.moonbridge.client.NativeTransport` (Java 8).
//!
//! Every export goes through one wrapper, [`entry`], which runs the body inside a panic boundary and turns
//! an error or a panic into a Java exception of its kind (the shape of libsignal's JNI bridge), each a
//! subclass of `dev.moonbridge.client.MoonBridgeException` (itself a `java.io.IOException`):
//!
//! | [`ClientError`] | Java exception | `int` constructor argument |
//! |---|---|---|
//! | `InvalidUrl`, `InvalidOptions`, `InvalidArgument`, a JNI argument error | `InvalidArgumentException` | result code |
//! | `Dns`, `Refused`, `ConnectTimeout`, `Connect`, `Tls`, `UpgradeRefused`, `Upgrade` | `ConnectFailedException` | result code |
//! | `ClosedByPeer` (not an orderly close: a read returns -1 for those) | `ClosedByPeerException` | close code, -1 for none |
//! | `Protocol` | `ProtocolErrorException` | result code |
//! | the rest, and a panic (`MB_ERR_PANIC`) | `MoonBridgeException` | result code |
//!
//! The classes are looked up once in `JNI_OnLoad` (with the class loader that loaded the library) and kept as
//! global references, so throwing never depends on the calling thread's class loader (Forge's
//! LaunchClassLoader) or on a `FindClass` that could fail while the JVM is low on memory; a class that is
//! missing falls back to `java.io.IOException`. Handles are the numbers of the handle registry
//! (`registry.rs`), checked on every call. Java computes buffer positions itself, so no Java method is
//! called from native code.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Duration;

use jni::objects::{GlobalRef, JByteArray, JByteBuffer, JClass, JString, JThrowable, JValue};
use jni::sys::{jbyte, jint, jlong, jstring, JNI_VERSION_1_8};
use jni::{JNIEnv, JavaVM};

use crate::error::MB_ERR_PANIC;
use crate::registry::{lookup, panic_text, register, unregister};
use crate::{ClientError, Connection, Options};

/// The exception classes, by kind.
struct Exceptions {
    io: GlobalRef,
    base: Option<GlobalRef>,
    connect: Option<GlobalRef>,
    closed: Option<GlobalRef>,
    protocol: Option<GlobalRef>,
    invalid: Option<GlobalRef>,
}

static EXCEPTIONS: OnceLock<Exceptions> = OnceLock::new();

/// Which exception class, and its `int` constructor argument.
#[derive(Clone, Copy)]
enum Kind {
    Base,
    Connect,
    Closed,
    Protocol,
    Invalid,
}

thread_local! {
    /// Per-thread copy buffer for writes from Java heap arrays.
    static WRITE_BUF: std::cell::RefCell<Vec<jbyte>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A global reference to `name`, or `None` (and no pending exception) when it cannot be loaded.
fn class_ref(env: &mut JNIEnv<'_>, name: &str) -> Option<GlobalRef> {
    match env.find_class(name) {
        Ok(class) => env.new_global_ref(class).ok(),
        Err(_) => {
            let _ = env.exception_clear();
            None
        }
    }
}

/// Caches the exception classes; called by the JVM when the library loads.
///
/// # Safety
/// Called by the JVM with a valid `JavaVM` pointer.
#[no_mangle]
pub unsafe extern "system" fn JNI_OnLoad(vm: *mut jni::sys::JavaVM, _reserved: *mut c_void) -> jint {
    let cached = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the JVM passes a valid JavaVM pointer.
        let vm = unsafe { JavaVM::from_raw(vm) }.ok()?;
        let mut env = vm.get_env().ok()?;
        let io = class_ref(&mut env, "java/io/IOException")?;
        let exceptions = Exceptions {
            io,
            base: class_ref(&mut env, "dev/moonbridge/client/MoonBridgeException"),
            connect: class_ref(&mut env, "dev/moonbridge/client/ConnectFailedException"),
            closed: class_ref(&mut env, "dev/moonbridge/client/ClosedByPeerException"),
            protocol: class_ref(&mut env, "dev/moonbridge/client/ProtocolErrorException"),
            invalid: class_ref(&mut env, "dev/moonbridge/client/InvalidArgumentException"),
        };
        let _ = EXCEPTIONS.set(exceptions);
        Some(())
    }));
    match cached {
        Ok(Some(())) => JNI_VERSION_1_8,
        _ => jni::sys::JNI_ERR,
    }
}

/// Why a JNI call failed.
enum Failure {
    Client(ClientError),
    Jni(jni::errors::Error),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Self::Client(e)
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Self {
        Self::Jni(e)
    }
}

/// The exception kind and constructor argument for an error.
fn kind_of(e: &ClientError) -> (Kind, i32) {
    match e {
        ClientError::InvalidUrl { .. } | ClientError::InvalidOptions(_) | ClientError::InvalidArgument(_) => {
            (Kind::Invalid, e.code())
        }
        ClientError::Dns { .. }
        | ClientError::Refused { .. }
        | ClientError::ConnectTimeout { .. }
        | ClientError::Connect { .. }
        | ClientError::Tls { .. }
        | ClientError::UpgradeRefused { .. }
        | ClientError::Upgrade(_) => (Kind::Connect, e.code()),
        ClientError::ClosedByPeer { code, .. } => (Kind::Closed, code.map_or(-1, i32::from)),
        ClientError::Protocol(_) => (Kind::Protocol, e.code()),
        _ => (Kind::Base, e.code()),
    }
}

/// Throws the exception of `kind` (`new X(message, arg)`), or an `IOException` when its class is missing.
fn throw(env: &mut JNIEnv<'_>, kind: Kind, message: &str, arg: i32) {
    if env.exception_check().unwrap_or(true) {
        return; // a Java exception is already pending: let it propagate
    }
    let Some(classes) = EXCEPTIONS.get() else {
        let _ = env.throw_new("java/io/IOException", message);
        return;
    };
    let class = match kind {
        Kind::Base => &classes.base,
        Kind::Connect => &classes.connect,
        Kind::Closed => &classes.closed,
        Kind::Protocol => &classes.protocol,
        Kind::Invalid => &classes.invalid,
    };
    if let Some(class) = class.as_ref().or(classes.base.as_ref()) {
        let built = env.new_string(message).and_then(|text| {
            env.new_object(class, "(Ljava/lang/String;I)V", &[JValue::Object(&text), JValue::Int(arg)])
        });
        match built {
            Ok(obj) => {
                if env.throw(JThrowable::from(obj)).is_ok() {
                    return;
                }
            }
            Err(_) if env.exception_check().unwrap_or(true) => return, // OutOfMemoryError, most likely
            Err(_) => {}
        }
    }
    if env.throw_new(&classes.io, message).is_err() {
        let _ = env.throw_new("java/lang/RuntimeException", message);
    }
}

/// The single entry wrapper: runs `f`; an error or a panic becomes a `MoonBridgeException` of its kind and
/// `fallback` is returned to Java (which ignores it because the exception is pending).
fn entry<'local, T>(
    env: &mut JNIEnv<'local>,
    fallback: T,
    f: impl FnOnce(&mut JNIEnv<'local>) -> Result<T, Failure>,
) -> T {
    match catch_unwind(AssertUnwindSafe(|| f(env))) {
        Ok(Ok(v)) => v,
        Ok(Err(Failure::Client(e))) => {
            let (kind, arg) = kind_of(&e);
            throw(env, kind, &e.to_string(), arg);
            fallback
        }
        Ok(Err(Failure::Jni(jni::errors::Error::JavaException))) => fallback,
        Ok(Err(Failure::Jni(e))) => {
            // Failures of JNI calls on the arguments: a null array, a buffer that is not direct.
            let e = ClientError::InvalidArgument(format!("JNI error: {e}"));
            throw(env, Kind::Invalid, &e.to_string(), e.code());
            fallback
        }
        Err(p) => {
            throw(env, Kind::Base, &panic_text(p.as_ref()), MB_ERR_PANIC);
            fallback
        }
    }
}

fn conn(handle: jlong) -> Result<std::sync::Arc<Connection>, Failure> {
    let h = usize::try_from(handle).map_err(|_| ClientError::InvalidArgument(format!("bad handle {handle}")))?;
    Ok(lookup(h)?)
}

fn range(offset: jint, length: jint, size: usize) -> Result<(usize, usize), Failure> {
    let bad = || ClientError::InvalidArgument(format!("offset {offset} length {length} outside a buffer of {size}"));
    let off = usize::try_from(offset).map_err(|_| bad())?;
    let len = usize::try_from(length).map_err(|_| bad())?;
    if off.checked_add(len).is_none_or(|end| end > size) {
        return Err(bad().into());
    }
    Ok((off, len))
}

fn timeout(ms: jint) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Result of a read for Java: bytes read, 0 on timeout, -1 after an orderly close.
fn read_result(r: Result<usize, ClientError>) -> Result<jint, Failure> {
    match r {
        Ok(n) => Ok(jint::try_from(n).unwrap_or(jint::MAX)),
        Err(e) if e.is_orderly_close() => Ok(-1),
        Err(e) => Err(e.into()),
    }
}

#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_nativeOpen<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    url: JString<'l>,
    options: JString<'l>,
) -> jlong {
    entry(&mut env, 0, |env| {
        if url.is_null() {
            return Err(ClientError::InvalidArgument("url is null".into()).into());
        }
        let url: String = env.get_string(&url)?.into();
        let options: Option<String> = if options.is_null() { None } else { Some(env.get_string(&options)?.into()) };
        let c = Connection::connect(&url, Options::from_json(options.as_deref())?)?;
        Ok(jlong::try_from(register(c)).unwrap_or(0))
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_nativeWriteArray<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    src: JByteArray<'l>,
    offset: jint,
    length: jint,
) {
    entry(&mut env, (), |env| {
        let c = conn(handle)?;
        let size = usize::try_from(env.get_array_length(&src)?).unwrap_or(0);
        let (off, len) = range(offset, length, size)?;
        // A plain region copy into a reused buffer, not a critical section: `send` takes a lock that a Java
        // reader thread may hold while it is inside a JNI call, and a critical section must never wait on one.
        WRITE_BUF.with_borrow_mut(|buf| {
            buf.clear();
            buf.resize(len, 0);
            env.get_byte_array_region(&src, jint::try_from(off).unwrap_or(0), buf.as_mut_slice())?;
            // SAFETY: i8 and u8 have the same size and alignment.
            let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len()) };
            let r = c.send(bytes);
            if buf.capacity() > 1 << 20 {
                *buf = Vec::new();
            }
            Ok(r?)
        })
    });
}

#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_nativeWriteDirect<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    src: JByteBuffer<'l>,
    position: jint,
    length: jint,
) {
    entry(&mut env, (), |env| {
        let c = conn(handle)?;
        let addr = env.get_direct_buffer_address(&src)?;
        let cap = env.get_direct_buffer_capacity(&src)?;
        let (off, len) = range(position, length, cap)?;
        // SAFETY: a direct buffer's memory is `cap` bytes at `addr` and off + len <= cap.
        let bytes = unsafe { std::slice::from_raw_parts(addr.add(off), len) };
        Ok(c.send(bytes)?)
    });
}

#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_nativeEndTick<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) {
    entry(&mut env, (), |_| Ok(conn(handle)?.end_tick()?));
}

#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_nativeReadArray<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    dst: JByteArray<'l>,
    offset: jint,
    length: jint,
    timeout_ms: jint,
) -> jint {
    entry(&mut env, 0, |env| {
        let c = conn(handle)?;
        let size = usize::try_from(env.get_array_length(&dst)?).unwrap_or(0);
        let (off, len) = range(offset, length, size)?;
        if len == 0 {
            return Ok(0);
        }
        let start = jint::try_from(off).unwrap_or(0);
        let mut copy_error = None;
        let r = c.recv_with(timeout(timeout_ms), |data| {
            let n = len.min(data.len());
            let chunk = data.get(..n).unwrap_or_default();
            // SAFETY: u8 and i8 have the same size and alignment.
            let chunk = unsafe { std::slice::from_raw_parts(chunk.as_ptr().cast::<jbyte>(), chunk.len()) };
            match env.set_byte_array_region(&dst, start, chunk) {
                Ok(()) => n,
                Err(e) => {
                    copy_error = Some(e);
                    0
                }
            }
        });
        if let Some(e) = copy_error {
            return Err(e.into());
        }
        read_result(r)
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_nativeReadDirect<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    dst: JByteBuffer<'l>,
    position: jint,
    length: jint,
    timeout_ms: jint,
) -> jint {
    entry(&mut env, 0, |env| {
        let c = conn(handle)?;
        let addr = env.get_direct_buffer_address(&dst)?;
        let cap = env.get_direct_buffer_capacity(&dst)?;
        let (off, len) = range(position, length, cap)?;
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: a direct buffer's memory is `cap` bytes at `addr` and off + len <= cap.
        let out = unsafe { std::slice::from_raw_parts_mut(addr.add(off), len) };
        read_result(c.recv(out, timeout(timeout_ms)))
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_nativeClose<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) {
    entry(&mut env, (), |_| {
        if let Some(c) = usize::try_from(handle).ok().and_then(unregister) {
            c.close();
        }
        Ok(())
    });
}

#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_version0<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
) -> jstring {
    entry(&mut env, std::ptr::null_mut(), |env| Ok(env.new_string(crate::VERSION)?.into_raw()))
}

/// `NativeTransport.discover0(host, resolver, timeoutMs)`: the MoonBridge URL of `_moonbridge.<host>`, or null
/// (see [`crate::discovery::lookup`]). `resolver` is `host:port` of a DNS server to ask instead of the
/// system's (tests), or null. A failed lookup throws `MoonBridgeException`; the Java side treats it like
/// null.
#[no_mangle]
pub extern "system" fn Java_dev_moonbridge_client_NativeTransport_discover0<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    host: JString<'l>,
    resolver: JString<'l>,
    timeout_ms: jint,
) -> jstring {
    entry(&mut env, std::ptr::null_mut(), |env| {
        if host.is_null() {
            return Err(ClientError::InvalidArgument("host is null".into()).into());
        }
        let host: String = env.get_string(&host)?.into();
        let resolver = if resolver.is_null() {
            None
        } else {
            let text: String = env.get_string(&resolver)?.into();
            Some(text.parse().map_err(|_| ClientError::InvalidArgument(format!("resolver {text:?} is not IP:port")))?)
        };
        let timeout = timeout(timeout_ms).filter(|t| !t.is_zero()).unwrap_or(Duration::from_secs(2));
        match crate::discovery::lookup(&host, resolver, timeout)? {
            Some(url) => Ok(env.new_string(url)?.into_raw()),
            None => Ok(std::ptr::null_mut()),
        }
    })
}
