//! A broker whose fetches answer slowly: a Tansu broker behind a proxy that
//! holds every Fetch response back for a set time, as a broker does that
//! reads a long backlog from slow storage (Tansu 0.6 itself takes seconds
//! for a fetch once its header table holds tens of thousands of rows).
//!
//! A Kafka broker answers one connection's requests in order, so a held
//! Fetch response holds back every later response on that connection too
//! (a `ListOffsets` sent behind it waits as long), which is what clients
//! sharing a connection with a consumer meet on such a broker.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{io_err, Result, Tansu};
use crate::process::free_port;

/// The Kafka API key of Fetch.
const API_FETCH: i16 = 1;
/// Largest frame the proxy forwards (a fetch response may be large).
const MAX_FRAME: usize = 256 << 20;
/// How often the accept loop looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// A Tansu broker reached through a proxy that delays Fetch responses.
/// Dropping it stops the proxy, then the broker.
#[derive(Debug)]
pub struct SlowFetchTansu {
    proxy: Proxy,
    _tansu: Tansu,
}

impl SlowFetchTansu {
    /// Starts a broker with `topics` (name, partitions) whose Fetch
    /// responses each wait `delay` before they go out.
    pub fn start(topics: &[(&str, u32)], delay: Duration) -> Result<Self> {
        let tansu = Tansu::start()?;
        for (topic, partitions) in topics {
            tansu.create_topic(topic, *partitions)?;
        }
        let port = free_port()?;
        let listener = TcpListener::bind(("127.0.0.1", port))
            .map_err(io_err(format!("bind the fetch proxy on {port}")))?;
        tansu.restart_advertising(&format!("tcp://127.0.0.1:{port}"), &[])?;
        let proxy = Proxy::start(listener, port, tansu.port, delay)?;
        tansu.wait_ready(super::START_TIMEOUT)?;
        Ok(Self {
            proxy,
            _tansu: tansu,
        })
    }

    /// The bootstrap address clients use (the proxy), `127.0.0.1:<port>`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.proxy.port)
    }

    /// Fetch responses held back so far.
    pub fn fetches_delayed(&self) -> u64 {
        self.proxy.shared.delayed.load(Ordering::Relaxed)
    }
}

/// What the proxy's threads share.
#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    /// How long each Fetch response waits.
    delay: Duration,
    delayed: AtomicU64,
    /// Every stream opened, shut down when the proxy stops.
    streams: Mutex<Vec<TcpStream>>,
}

#[derive(Debug)]
struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    fn start(listener: TcpListener, port: u16, upstream: u16, delay: Duration) -> Result<Self> {
        listener
            .set_nonblocking(true)
            .map_err(io_err("fetch proxy: non-blocking accept"))?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            delay,
            delayed: AtomicU64::new(0),
            streams: Mutex::default(),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("fetch-proxy".into())
            .spawn(move || accept_loop(&listener, upstream, &accept_shared))
            .map_err(io_err("fetch proxy: spawn the accept thread"))?;
        Ok(Self {
            port,
            shared,
            accept: Some(accept),
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let streams = match self.shared.streams.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for s in streams {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, upstream: u16, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                if let Err(e) = connect(client, upstream, shared) {
                    tracing::warn!(error = %e, "fetch proxy: a connection failed to open");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
            Err(e) => {
                tracing::warn!(error = %e, "fetch proxy: accept failed");
                thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

/// Joins `client` to a new connection to the broker: requests go through
/// as they are (the correlation ids of Fetch requests noted), responses
/// too, but a Fetch response first waits out the delay.
fn connect(client: TcpStream, upstream: u16, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect(("127.0.0.1", upstream))?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        if let (Ok(clone), Ok(mut streams)) = (s.try_clone(), shared.streams.lock()) {
            streams.push(clone);
        }
    }
    let fetches = Arc::new(Mutex::new(HashSet::new()));
    let requests = (client.try_clone()?, server.try_clone()?);
    let noted = Arc::clone(&fetches);
    thread::Builder::new()
        .name("fetch-proxy-up".into())
        .spawn(move || forward_requests(requests.0, requests.1, &noted))?;
    let shared = Arc::clone(shared);
    thread::Builder::new()
        .name("fetch-proxy-down".into())
        .spawn(move || forward_responses(server, client, &fetches, &shared))?;
    Ok(())
}

/// Reads one length-prefixed Kafka frame (the length included).
fn read_frame(from: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len)?;
    let size = i32::from_be_bytes(len);
    let size = usize::try_from(size)
        .ok()
        .filter(|s| *s <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad frame size"))?;
    let mut frame = vec![0u8; 4 + size];
    frame[..4].copy_from_slice(&len);
    from.read_exact(&mut frame[4..])?;
    Ok(frame)
}

fn be_i16(frame: &[u8], at: usize) -> Option<i16> {
    frame
        .get(at..at + 2)
        .map(|b| i16::from_be_bytes([b[0], b[1]]))
}

fn be_i32(frame: &[u8], at: usize) -> Option<i32> {
    frame
        .get(at..at + 4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn forward_requests(mut client: TcpStream, mut server: TcpStream, fetches: &Mutex<HashSet<i32>>) {
    while let Ok(frame) = read_frame(&mut client) {
        // Request header: api_key (i16), api_version (i16), correlation_id (i32).
        if be_i16(&frame, 4) == Some(API_FETCH) {
            if let (Some(id), Ok(mut ids)) = (be_i32(&frame, 8), fetches.lock()) {
                ids.insert(id);
            }
        }
        if server.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Write);
}

fn forward_responses(
    mut server: TcpStream,
    mut client: TcpStream,
    fetches: &Mutex<HashSet<i32>>,
    shared: &Shared,
) {
    while let Ok(frame) = read_frame(&mut server) {
        // Response header: correlation_id (i32).
        let is_fetch = match (be_i32(&frame, 4), fetches.lock()) {
            (Some(id), Ok(mut ids)) => ids.remove(&id),
            _ => false,
        };
        if is_fetch {
            shared.delayed.fetch_add(1, Ordering::Relaxed);
            let until = Instant::now() + shared.delay;
            while Instant::now() < until && !shared.stop.load(Ordering::Relaxed) {
                thread::sleep(ACCEPT_POLL.min(until.saturating_duration_since(Instant::now())));
            }
        }
        if client.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Write);
}
