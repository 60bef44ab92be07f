//! A TCP proxy between a client and one etcd member, for the network-fault tests: it listens
//! on 127.0.0.1:0, forwards to the member, and can be told to delay or drop the member's
//! replies, drop the client's requests, cut every connection, starve one gRPC stream (a watch
//! stuck on a hung member), or hold a request back and deliver it much later (a request stuck
//! in a member that resumes).
//!
//! It reads the HTTP/2 frames (9-byte header, then the payload) in both directions, so that a
//! rule can look at the payload of one request (etcd's protobuf messages are not compressed:
//! keys and values appear as they are) and act on one stream. Only DATA frames are ever
//! dropped one by one: HEADERS frames carry HPACK state that both ends must see in the same
//! order. Rules that drop bytes wholesale leave the connection's state out of step, so they
//! are undone by [`Proxy::heal`], which also cuts every connection (the client reconnects).
//!
//! The proxy runs on a thread of its own (a current-thread runtime), so that blocking tests
//! and async tests use it alike, and a test blocked on the lock does not block the proxy.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// What happens to the member's replies (bytes read from the member from now on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replies {
    /// Forwarded at once.
    Pass,
    /// Forwarded this long after they were read, in order.
    Delay(Duration),
    /// Discarded.
    Drop,
}

/// HTTP/2's client connection preface, which comes before the client's first frame.
const PREFACE: usize = 24;
const DATA: u8 = 0;

#[derive(Default)]
struct Rules {
    replies: Option<Replies>,
    /// When a request's DATA holds this, replies switch to the rule.
    trigger: Option<(Vec<u8>, Replies)>,
    /// A stream whose request's DATA holds this gets no DATA frames back, ever.
    mute: Option<Vec<u8>>,
}

struct Shared {
    target: String,
    rules: Mutex<Rules>,
    drop_requests: AtomicBool,
    /// Bumped at each change of the rules below; connections re-read them then.
    control: watch::Sender<u64>,
    /// Connections numbered below this are closed.
    cut_below: AtomicU64,
    /// Connections numbered below this hold the client's bytes back (see `freeze`).
    frozen_below: AtomicU64,
    detach: AtomicBool,
    flush: AtomicBool,
    next_id: AtomicU64,
    /// Every byte held back so far (for `held_contains`).
    held: Mutex<Vec<u8>>,
    shutdown: AtomicBool,
}

impl Shared {
    fn replies(&self) -> Replies {
        self.rules.lock().unwrap().replies.unwrap_or(Replies::Pass)
    }

    fn poke(&self) {
        self.control.send_modify(|g| *g += 1);
    }
}

/// A running proxy; stops when dropped (its connections are closed).
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Starts forwarding 127.0.0.1:(a free port) to `target` (`HOST:PORT`).
    pub fn start(target: &str) -> Proxy {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        std_listener.set_nonblocking(true).unwrap();
        let port = std_listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            target: target.to_owned(),
            rules: Mutex::new(Rules::default()),
            drop_requests: AtomicBool::new(false),
            control: watch::Sender::new(0),
            cut_below: AtomicU64::new(0),
            frozen_below: AtomicU64::new(0),
            detach: AtomicBool::new(false),
            flush: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            held: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(accept(std_listener, s));
            })
            .unwrap();
        Proxy { port, shared }
    }

    /// `127.0.0.1:PORT`, to give the client instead of the member's address.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn set_replies(&self, r: Replies) {
        self.shared.rules.lock().unwrap().replies = Some(r);
        self.shared.poke();
    }

    /// The member's replies reach the client `d` late.
    pub fn delay_replies(&self, d: Duration) {
        self.set_replies(Replies::Delay(d));
    }

    /// The member's replies are lost (its answers to requests it did apply, included).
    pub fn drop_replies(&self) {
        self.set_replies(Replies::Drop);
    }

    /// Nothing gets through either way (a partition, or a hung member).
    pub fn blackhole(&self) {
        self.shared.drop_requests.store(true, Ordering::SeqCst);
        self.set_replies(Replies::Drop);
    }

    /// Once a request whose payload holds `pattern` has gone through, replies follow `then`
    /// (the reply to that request included).
    pub fn on_request(&self, pattern: &[u8], then: Replies) {
        self.shared.rules.lock().unwrap().trigger = Some((pattern.to_vec(), then));
        self.shared.poke();
    }

    /// A stream whose request holds `pattern` never gets any DATA back (a watch that stays
    /// open, its events never delivered, while the connection and its other streams work).
    pub fn mute_streams_of(&self, pattern: &[u8]) {
        self.shared.rules.lock().unwrap().mute = Some(pattern.to_vec());
        self.shared.poke();
    }

    /// Closes every connection now (the client sees them reset and reconnects).
    pub fn cut(&self) {
        let next = self.shared.next_id.load(Ordering::SeqCst);
        self.shared.cut_below.store(next, Ordering::SeqCst);
        self.shared.poke();
    }

    /// Back to plain forwarding, every connection cut (bytes dropped meanwhile left their
    /// HTTP/2 state out of step).
    pub fn heal(&self) {
        *self.shared.rules.lock().unwrap() = Rules::default();
        self.shared.drop_requests.store(false, Ordering::SeqCst);
        self.cut();
    }

    /// The connections open now stop forwarding the client's bytes: they are kept, to be
    /// delivered by [`flush`](Self::flush). New connections are not affected.
    pub fn freeze(&self) {
        let next = self.shared.next_id.load(Ordering::SeqCst);
        self.shared.frozen_below.store(next, Ordering::SeqCst);
        self.shared.poke();
    }

    /// Whether the bytes held back by [`freeze`](Self::freeze) contain `pattern`.
    pub fn held_contains(&self, pattern: &[u8]) -> bool {
        let held = self.shared.held.lock().unwrap();
        held.windows(pattern.len()).any(|w| w == pattern)
    }

    /// Frozen connections close their client side (the client sees them reset); their member
    /// side stays open with the bytes held back.
    pub fn detach(&self) {
        self.shared.detach.store(true, Ordering::SeqCst);
        self.shared.poke();
    }

    /// Frozen connections deliver the bytes they held back to the member (which then applies
    /// those requests, late), then close.
    pub fn flush(&self) {
        self.shared.flush.store(true, Ordering::SeqCst);
        self.shared.poke();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.cut();
    }
}

async fn accept(listener: std::net::TcpListener, shared: Arc<Shared>) {
    let listener = TcpListener::from_std(listener).unwrap();
    let mut control = shared.control.subscribe();
    loop {
        tokio::select! {
            r = listener.accept() => {
                let Ok((client, _)) = r else { continue };
                let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(connection(client, id, shared.clone()));
            }
            _ = control.changed() => {
                if shared.shutdown.load(Ordering::SeqCst) {
                    return;
                }
            }
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Splits complete HTTP/2 frames off the front of `buf`.
fn frames(buf: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        if buf.len() < 9 {
            return out;
        }
        let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
        if buf.len() < 9 + len {
            return out;
        }
        out.push(buf.drain(..9 + len).collect());
    }
}

fn stream_of(frame: &[u8]) -> u32 {
    u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff
}

/// One client connection and its connection to the member, in one task.
async fn connection(client: TcpStream, id: u64, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(&shared.target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let mut control = shared.control.subscribe();
    let (mut cbuf, mut sbuf) = (vec![0u8; 65536], vec![0u8; 65536]);
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let mut preface_left = PREFACE;
    let mut muted: HashSet<u32> = HashSet::new();
    // Replies waiting for their time (the Delay rule).
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut held: Vec<u8> = Vec::new();
    let mut client_open = true;
    let mut flush_at: Option<Instant> = None;
    loop {
        if id < shared.cut_below.load(Ordering::SeqCst) {
            return;
        }
        let frozen = id < shared.frozen_below.load(Ordering::SeqCst);
        if frozen && client_open && shared.detach.load(Ordering::SeqCst) {
            client_open = false;
            let _ = cw.shutdown().await;
        }
        if frozen && flush_at.is_none() && shared.flush.load(Ordering::SeqCst) {
            if sw.write_all(&held).await.is_err() {
                return;
            }
            held.clear();
            flush_at = Some(Instant::now() + Duration::from_secs(1));
        }
        let due = queue.front().map(|(t, _)| *t);
        tokio::select! {
            r = cr.read(&mut cbuf), if client_open => {
                let n = match r { Ok(0) | Err(_) => return, Ok(n) => n };
                let mut bytes = &cbuf[..n];
                let mut pass = Vec::new();
                if preface_left > 0 {
                    let k = preface_left.min(bytes.len());
                    pass.extend_from_slice(&bytes[..k]);
                    preface_left -= k;
                    bytes = &bytes[k..];
                }
                up.extend_from_slice(bytes);
                for f in frames(&mut up) {
                    if f[3] == DATA {
                        let mut rules = shared.rules.lock().unwrap();
                        if rules.mute.as_deref().is_some_and(|m| contains(&f[9..], m)) {
                            muted.insert(stream_of(&f));
                        }
                        if let Some((p, then)) = rules.trigger.clone()
                            && contains(&f[9..], &p)
                        {
                            rules.replies = Some(then);
                            rules.trigger = None;
                        }
                    }
                    pass.extend_from_slice(&f);
                }
                if id < shared.frozen_below.load(Ordering::SeqCst) {
                    shared.held.lock().unwrap().extend_from_slice(&pass);
                    held.extend_from_slice(&pass);
                } else if !shared.drop_requests.load(Ordering::SeqCst)
                    && sw.write_all(&pass).await.is_err()
                {
                    return;
                }
            }
            r = sr.read(&mut sbuf) => {
                let n = match r { Ok(0) | Err(_) => return, Ok(n) => n };
                down.extend_from_slice(&sbuf[..n]);
                let mut out = Vec::new();
                for f in frames(&mut down) {
                    if f[3] == DATA && muted.contains(&stream_of(&f)) {
                        continue;
                    }
                    out.extend_from_slice(&f);
                }
                match shared.replies() {
                    Replies::Drop => {}
                    _ if !client_open => {}
                    Replies::Pass if queue.is_empty() => {
                        if cw.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                    Replies::Pass => queue.push_back((Instant::now(), out)),
                    Replies::Delay(d) => queue.push_back((Instant::now() + d, out)),
                }
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                while let Some((t, _)) = queue.front() {
                    if *t > Instant::now() {
                        break;
                    }
                    let (_, b) = queue.pop_front().unwrap();
                    if client_open && cw.write_all(&b).await.is_err() {
                        return;
                    }
                }
            }
            () = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                return;
            }
            r = control.changed() => {
                if r.is_err() {
                    return;
                }
            }
        }
    }
}
