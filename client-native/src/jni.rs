//! JNI exports for `dev.moonbridge.client.NativeTransport` (Java 8).
//!
//! Every export goes through one wrapper, [`entry`], which runs the body inside a panic boundary and turns
//! an error or a panic into a `java.io.IOException` carrying the error text (the shape of libsignal's JNI
//! bridge). The `IOException` class is looked up once in `JNI_OnLoad` and kept as a global reference, so
//! throwing never depends on the calling thread's class loader (Forge's LaunchClassLoader) or on a
//! `FindClass` that could fail while the JVM is low on memory. Handles are the registry numbers of
//! [`crate::ffi`], checked on every call. Java computes buffer positions itself, so no Java method is called
//! from native code.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Duration;

use jni::objects::{GlobalRef, JByteArray, JByteBuffer, JClass, JString};
use jni::sys::{jbyte, jint, jlong, jstring, JNI_VERSION_1_8};
use jni::{JNIEnv, JavaVM};

use crate::ffi::{lookup, panic_text, register, unregister};
use crate::{ClientError, Connection, Options};

static IO_EXCEPTION: OnceLock<GlobalRef> = OnceLock::new();

thread_local! {
    /// Per-thread copy buffer for writes from Java heap arrays.
    static WRITE_BUF: std::cell::RefCell<Vec<jbyte>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Caches the exception class; called by the JVM when the library loads.
///
/// # Safety
/// Called by the JVM with a valid `JavaVM` pointer.
#[no_mangle]
pub unsafe extern "system" fn JNI_OnLoad(vm: *mut jni::sys::JavaVM, _reserved: *mut c_void) -> jint {
    let cached = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the JVM passes a valid JavaVM pointer.
        let vm = unsafe { JavaVM::from_raw(vm) }.ok()?;
        let mut env = vm.get_env().ok()?;
        let class = env.find_class("java/io/IOException").ok()?;
        let global = env.new_global_ref(class).ok()?;
        let _ = IO_EXCEPTION.set(global);
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

fn throw(env: &mut JNIEnv<'_>, message: &str) {
    if env.exception_check().unwrap_or(true) {
        return; // a Java exception is already pending: let it propagate
    }
    let thrown = match IO_EXCEPTION.get() {
        Some(class) => env.throw_new(class, message),
        None => env.throw_new("java/io/IOException", message),
    };
    if thrown.is_err() {
        let _ = env.throw_new("java/lang/RuntimeException", message);
    }
}

/// The single entry wrapper: runs `f`; an error or a panic becomes an `IOException` and `fallback` is
/// returned to Java (which ignores it because the exception is pending).
fn entry<'local, T>(
    env: &mut JNIEnv<'local>,
    fallback: T,
    f: impl FnOnce(&mut JNIEnv<'local>) -> Result<T, Failure>,
) -> T {
    match catch_unwind(AssertUnwindSafe(|| f(env))) {
        Ok(Ok(v)) => v,
        Ok(Err(Failure::Client(e))) => {
            throw(env, &e.to_string());
            fallback
        }
        Ok(Err(Failure::Jni(jni::errors::Error::JavaException))) => fallback,
        Ok(Err(Failure::Jni(e))) => {
            throw(env, &format!("JNI error: {e}"));
            fallback
        }
        Err(p) => {
            throw(env, &format!("panic in moonbridge-client: {}", panic_text(p.as_ref())));
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
/// system's (tests), or null. A failed lookup throws `IOException`; the Java side treats it like null.
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
