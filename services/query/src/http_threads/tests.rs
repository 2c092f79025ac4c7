use std::time::Duration;

use axum::routing::get;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::*;

/// Longest any step of these tests waits.
const BOUND: Duration = Duration::from_secs(10);

/// Answers `GET /who` with the name of the thread that served it.
fn who_app() -> Router {
    Router::new().route(
        "/who",
        get(|| async { std::thread::current().name().unwrap_or("?").to_owned() }),
    )
}

async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

/// Sends `GET /who` on a kept-alive connection and returns the body.
async fn who<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut S) -> String {
    conn.write_all(b"GET /who HTTP/1.1\r\nhost: eddy\r\n\r\n")
        .await
        .expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::time::timeout(BOUND, conn.read(&mut buf))
            .await
            .expect("answered in time")
            .expect("read");
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .expect("content-length");
            if body.len() >= len {
                return body[..len].to_owned();
            }
        }
    }
}

fn thread(open: usize) -> (Thread, mpsc::UnboundedReceiver<std::net::TcpStream>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let thread = Thread {
        connections: tx,
        open: Arc::new(AtomicUsize::new(open)),
    };
    (thread, rx)
}

#[test]
fn the_least_loaded_running_thread_is_chosen_and_ties_rotate() {
    let (a, _ra) = thread(2);
    let (b, _rb) = thread(1);
    let (c, rc) = thread(1);
    let threads = vec![a, b, c];
    assert_eq!(least_loaded(&threads, 0), Some(1));
    assert_eq!(least_loaded(&threads, 1), Some(2));
    assert_eq!(least_loaded(&threads, 2), Some(1));
    drop(rc);
    assert_eq!(
        least_loaded(&threads, 1),
        Some(1),
        "a stopped thread is skipped"
    );
    let (d, rd) = thread(0);
    drop(rd);
    assert_eq!(least_loaded(&[d], 0), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_spread_over_the_threads_and_closed_on_stop() {
    let (listener, addr) = listener().await;
    let threads = HttpThreads::start(listener, who_app(), None, 2).expect("start");
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(TcpStream::connect(addr).await.expect("connect"));
    }
    let mut served = Vec::new();
    for conn in &mut conns {
        // Two requests on each connection: both on the same thread.
        let first = who(conn).await;
        assert_eq!(who(conn).await, first);
        served.push(first);
    }
    served.sort();
    assert_eq!(
        served,
        ["eddy-http-0", "eddy-http-0", "eddy-http-1", "eddy-http-1"],
        "each thread takes half the connections"
    );
    drop(threads);
    for conn in &mut conns {
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(BOUND, conn.read(&mut buf))
            .await
            .expect("closed in time")
            .unwrap_or(0);
        assert_eq!(n, 0, "the connection is closed once the threads stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_frees_its_place() {
    let (listener, addr) = listener().await;
    let _threads = HttpThreads::start(listener, who_app(), None, 2).expect("start");
    let mut conns = Vec::new();
    for _ in 0..3 {
        let mut conn = TcpStream::connect(addr).await.expect("connect");
        let on = who(&mut conn).await;
        conns.push((on, conn));
    }
    // Ties rotate: the first and the third share a thread.
    assert_eq!(conns[0].0, conns[2].0);
    assert_ne!(conns[0].0, conns[1].0);
    let busy = conns[0].0.clone();
    let (_, kept) = conns.remove(1);
    drop(conns);
    // Once both closes are counted, the busy thread has the fewest open
    // connections again; until then a new one goes to the other thread.
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let mut next = TcpStream::connect(addr).await.expect("connect");
        if who(&mut next).await == busy {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "closes never counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(kept);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_tls_client_does_not_hold_up_the_others() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    let dir = tempfile::tempdir().expect("tmp");
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).expect("write");
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).expect("write");
    let identity = crate::tls::TlsIdentity::load(&cert_path, &key_path).expect("identity");
    let (listener, addr) = listener().await;
    // One thread, so the silent client and the others share it.
    let _threads =
        HttpThreads::start(listener, who_app(), Some(identity.http_acceptor()), 1).expect("start");
    let _silent = TcpStream::connect(addr).await.expect("connect");

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    for _ in 0..2 {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
        let mut tls = tokio::time::timeout(BOUND, connector.connect(name, tcp))
            .await
            .expect("handshake in time")
            .expect("handshake");
        assert_eq!(who(&mut tls).await, "eddy-http-0");
    }
}
