//! The TCP fault proxy: a [`LinkProxy`] forwards the bytes of every connection it accepts to
//! one upstream address, both ways, until it is blocked. The [`crate::links`] mesh puts one on
//! each directed pair of nodes; a cluster with client doors puts one in front of each node's
//! client port ([`LinkProxy::start_door`]), where single dialers can be cut off by their
//! address.
//!
//! A blocked link is a black hole: the connections it carried are closed, and new ones are
//! accepted but never forwarded (nor answered) until the link is healed, when they are closed
//! too so that the dialer reconnects; no byte sent after the block is forwarded, even one
//! already on its way through a connection. A cut source is the same black hole for the connections
//! that come from that one address. The proxy may dial the upstream from a given source
//! address, or from the dialer's own, so that the upstream sees the connection come from the
//! node (or the client) that dialed. Owns only its listener and connections: never starts,
//! stops or signals a process, and never judges the cluster.

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a connection to the upstream may take before the accepted connection is dropped
/// (as an unreachable peer's would be).
const UPSTREAM_CONNECT_MAX: Duration = Duration::from_secs(1);

/// How many bytes a connection forwards per read, each way (as `tokio::io::copy`'s buffer).
const FORWARD_BUFFER: usize = 8 * 1024;

/// What a link does with its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Forwards bytes both ways.
    Open,
    /// Forwards nothing: connections are held without a byte read or written.
    Blocked,
    /// The proxy was dropped: every connection task ends.
    Closed,
}

/// The link's whole state: its mode, and the dialer addresses it holds off while open.
#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    mode: Mode,
    cut: BTreeSet<IpAddr>,
}

impl State {
    /// What the link does with a connection from `dialer`.
    fn mode_for(&self, dialer: IpAddr) -> Mode {
        match self.mode {
            Mode::Open if self.cut.contains(&dialer) => Mode::Blocked,
            mode => mode,
        }
    }
}

/// Where the proxy's upstream connections come from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Any address the operating system picks.
    Any,
    /// This address (any port).
    Fixed(IpAddr),
    /// The address of the connection being forwarded (any port).
    Dialer,
}

/// One directed link: a listener whose connections are forwarded to `upstream` while the link
/// is open. Dropping it closes its listener and every connection it holds.
pub struct LinkProxy {
    address: SocketAddr,
    upstream: SocketAddr,
    state: watch::Sender<State>,
    accept_task: JoinHandle<()>,
}

impl LinkProxy {
    /// Starts an open link listening on `listen` (port 0 picks a free one), forwarding to
    /// `upstream` (which need not listen yet: a connection it refuses is closed on the dialing
    /// side too). Upstream connections are made from `source` (any port) when given, so that
    /// the upstream sees them come from the dialing node's address.
    ///
    /// # Errors
    ///
    /// When `listen` cannot be bound.
    pub async fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        source: Option<IpAddr>,
    ) -> io::Result<LinkProxy> {
        LinkProxy::start_from(listen, upstream, source.map_or(Source::Any, Source::Fixed)).await
    }

    /// Starts an open door in front of a node's client port: as [`LinkProxy::start`], but each
    /// upstream connection comes from the address of the connection it forwards, so that the
    /// node sees (and rate-limits) each client by its own address, and
    /// [`LinkProxy::cut_source`] can hold off one client.
    ///
    /// # Errors
    ///
    /// When `listen` cannot be bound.
    pub async fn start_door(listen: SocketAddr, upstream: SocketAddr) -> io::Result<LinkProxy> {
        LinkProxy::start_from(listen, upstream, Source::Dialer).await
    }

    async fn start_from(
        listen: SocketAddr,
        upstream: SocketAddr,
        source: Source,
    ) -> io::Result<LinkProxy> {
        let listener = TcpListener::bind(listen).await?;
        let address = listener.local_addr()?;
        let (state, _) = watch::channel(State { mode: Mode::Open, cut: BTreeSet::new() });
        let accept_task = tokio::spawn(accept_loop(listener, upstream, source, state.clone()));
        Ok(LinkProxy { address, upstream, state, accept_task })
    }

    /// The address to dial instead of the upstream.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The address the link forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Makes the link a black hole: its connections are closed and new ones are held, never
    /// forwarded, until [`LinkProxy::heal`]. Blocking a blocked link changes nothing.
    pub fn block(&self) {
        self.update(|state| state.mode = Mode::Blocked);
    }

    /// Opens the link again: the connections held while it was blocked are closed (their
    /// dialers reconnect) and new ones are forwarded. Healing an open link changes nothing.
    /// The sources cut off stay cut off ([`LinkProxy::restore_sources`]).
    pub fn heal(&self) {
        self.update(|state| state.mode = Mode::Open);
    }

    /// Makes the link a black hole for the connections that come from `dialer` alone, as
    /// [`LinkProxy::block`] does for all of them, until [`LinkProxy::restore_sources`].
    pub fn cut_source(&self, dialer: IpAddr) {
        self.update(|state| {
            state.cut.insert(dialer);
        });
    }

    /// Lets every source cut off by [`LinkProxy::cut_source`] through again (the connections
    /// held meanwhile are closed, so that their dialers reconnect).
    pub fn restore_sources(&self) {
        self.update(|state| state.cut.clear());
    }

    /// Whether the link is blocked.
    pub fn is_blocked(&self) -> bool {
        self.state.borrow().mode == Mode::Blocked
    }

    /// The sources cut off, in order.
    pub fn cut_sources(&self) -> Vec<IpAddr> {
        self.state.borrow().cut.iter().copied().collect()
    }

    /// Changes the state only when it differs, so that a repeated block or heal does not wake
    /// (and reset) the connections of a link that is already in that state.
    fn update(&self, change: impl FnOnce(&mut State)) {
        self.state.send_if_modified(|now| {
            let before = now.clone();
            change(now);
            *now != before
        });
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.state.send_modify(|state| state.mode = Mode::Closed);
        self.accept_task.abort();
    }
}

/// Accepts connections until the proxy is dropped, each handled by its own task.
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    source: Source,
    state: watch::Sender<State>,
) {
    loop {
        let (client, dialer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Accept errors are transient (too many open files, a reset before accept).
                tracing::debug!(%error, "proxy accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let source = match source {
            Source::Any => None,
            Source::Fixed(ip) => Some(ip),
            Source::Dialer => Some(dialer.ip()),
        };
        tokio::spawn(handle(client, dialer.ip(), upstream, source, state.subscribe()));
    }
}

/// Connects to `upstream`, from `source` when given.
async fn connect(upstream: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let Some(source) = source else { return TcpStream::connect(upstream).await };
    let socket = if source.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(upstream).await
}

/// Forwards one accepted connection (from `dialer`) while the link is open to it, or holds it
/// while blocked; either ends (closing both sides) when what the link does with it changes
/// from what it was started in.
async fn handle(
    mut client: TcpStream,
    dialer: IpAddr,
    upstream: SocketAddr,
    source: Option<IpAddr>,
    mut state: watch::Receiver<State>,
) {
    let started_in = state.borrow_and_update().mode_for(dialer);
    match started_in {
        Mode::Closed => {}
        Mode::Blocked => {
            // Neither read nor written: the dialer sees a connection that never answers. Reset
            // when the mode changes, so that the dialer notices at once.
            leaves(&mut state, dialer, Mode::Blocked).await;
            let _ = client.set_zero_linger();
        }
        Mode::Open => {
            let connect = tokio::time::timeout(UPSTREAM_CONNECT_MAX, connect(upstream, source));
            let mut server = tokio::select! {
                connected = connect => match connected {
                    Ok(Ok(server)) => server,
                    // Refused or timed out: the dialer sees its connection closed.
                    _ => return,
                },
                _ = leaves(&mut state, dialer, Mode::Open) => return,
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            // Biased: a change of mode is seen before another byte is forwarded.
            let checks = state.clone();
            let cut = tokio::select! {
                biased;
                _ = leaves(&mut state, dialer, Mode::Open) => true,
                _ = forward_both_ways(&mut client, &mut server, &checks, dialer) => false,
            };
            if cut {
                // Both sides are reset when dropped, with nothing more delivered.
                let _ = client.set_zero_linger();
                let _ = server.set_zero_linger();
            }
        }
    }
}

/// Forwards `client` to `server` and back until both directions have ended.
async fn forward_both_ways(
    client: &mut TcpStream,
    server: &mut TcpStream,
    state: &watch::Receiver<State>,
    dialer: IpAddr,
) {
    let (mut client_reads, mut client_writes) = client.split();
    let (mut server_reads, mut server_writes) = server.split();
    tokio::join!(
        forward(&mut client_reads, &mut server_writes, state, dialer),
        forward(&mut server_reads, &mut client_writes, state, dialer),
    );
}

/// Copies what `from` reads to `to` until `from` ends (then shuts `to` down, as a closed
/// connection's far side would see) or either fails. Bytes read after the link stopped
/// forwarding `dialer`'s connections are dropped, not written: a cut or block takes effect for
/// every byte sent after it, even one read in the same wake-up that brought the change.
async fn forward<R, W>(from: &mut R, to: &mut W, state: &watch::Receiver<State>, dialer: IpAddr)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0; FORWARD_BUFFER];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let open = state.borrow().mode_for(dialer) == Mode::Open;
        if !open {
            // `leaves` ends the connection; nothing more is forwarded meanwhile.
            return std::future::pending().await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Waits until what the link does with `dialer`'s connections is no longer `mode` (or the
/// proxy is gone).
async fn leaves(receiver: &mut watch::Receiver<State>, dialer: IpAddr, mode: Mode) {
    // The guard `wait_for` returns is not `Send`: it is dropped here, before any other await.
    let _ = receiver.wait_for(|now| now.mode_for(dialer) != mode).await.map(|_| ());
}

#[cfg(test)]
pub(crate) mod tests {
    //! The proxy alone, against an echo server: forwarding, the black hole, healing, and the
    //! source address; the helpers serve the mesh's tests too.

    use std::collections::BTreeSet;
    use std::io;
    use std::net::{IpAddr, SocketAddr};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::watch;
    use tokio::task::JoinHandle;

    use super::{LinkProxy, Mode, State, forward};

    /// How long an echo that should come back may take.
    pub(crate) const ECHO_MAX: Duration = Duration::from_secs(5);

    /// How long a test waits to see that a blocked link answers nothing. Not a timing
    /// assertion: a black hole answers nothing however long one waits.
    pub(crate) const SILENCE: Duration = Duration::from_millis(300);

    /// Any free loopback port.
    pub(crate) fn any_port() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    /// An echo server on a loopback port; dropped with the test's runtime.
    pub(crate) async fn echo_server() -> io::Result<(SocketAddr, JoinHandle<()>)> {
        let listener = TcpListener::bind(any_port()).await?;
        let address = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut reader, mut writer) = stream.split();
                    let _ = tokio::io::copy(&mut reader, &mut writer).await;
                });
            }
        });
        Ok((address, task))
    }

    /// Writes `message` on `stream` and reads as many bytes back, within `wait`: `Ok(None)` if
    /// none came back in time, `Err` if the connection failed.
    pub(crate) async fn round_trip(
        stream: &mut TcpStream,
        message: &[u8],
        wait: Duration,
    ) -> io::Result<Option<Vec<u8>>> {
        stream.write_all(message).await?;
        let mut echoed = vec![0; message.len()];
        match tokio::time::timeout(wait, stream.read_exact(&mut echoed)).await {
            Ok(read) => read.map(|_| Some(echoed)),
            Err(_elapsed) => Ok(None),
        }
    }

    /// Whether the connection is closed (reads end or fail) within [`ECHO_MAX`].
    pub(crate) async fn is_closed(stream: &mut TcpStream) -> bool {
        let mut byte = [0; 1];
        match tokio::time::timeout(ECHO_MAX, stream.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) | Err(_) => false,
        }
    }

    #[tokio::test]
    async fn open_link_forwards_blocked_link_is_a_black_hole_until_healed() -> io::Result<()> {
        let (upstream, _server) = echo_server().await?;
        let proxy = LinkProxy::start(any_port(), upstream, None).await?;

        // Open: bytes go both ways.
        let mut before = TcpStream::connect(proxy.address()).await?;
        assert_eq!(
            round_trip(&mut before, b"hello", ECHO_MAX).await?.as_deref(),
            Some(&b"hello"[..])
        );

        // Blocked: the forwarded connection is closed, a new one is accepted but never answered.
        proxy.block();
        assert!(is_closed(&mut before).await, "a blocked link keeps its connection open");
        let mut during = TcpStream::connect(proxy.address()).await?;
        assert_eq!(round_trip(&mut during, b"lost", SILENCE).await?, None, "blocked link answered");

        // Blocked again: nothing changes, the held connection stays held.
        proxy.block();
        assert_eq!(round_trip(&mut during, b"lost", SILENCE).await?, None, "blocked link answered");

        // Healed: the held connection is closed (its dialer reconnects), new ones are forwarded.
        proxy.heal();
        assert!(is_closed(&mut during).await, "a connection held while blocked stays open");
        let mut after = TcpStream::connect(proxy.address()).await?;
        assert_eq!(
            round_trip(&mut after, b"again", ECHO_MAX).await?.as_deref(),
            Some(&b"again"[..])
        );

        // Healed again: an open link keeps its connections.
        proxy.heal();
        assert_eq!(
            round_trip(&mut after, b"still", ECHO_MAX).await?.as_deref(),
            Some(&b"still"[..])
        );
        Ok(())
    }

    #[tokio::test]
    async fn link_to_a_dead_upstream_closes_the_connection() -> io::Result<()> {
        // A port nobody listens on any more.
        let upstream = TcpListener::bind(any_port()).await?.local_addr()?;
        let proxy = LinkProxy::start(any_port(), upstream, None).await?;
        let mut stream = TcpStream::connect(proxy.address()).await?;
        assert!(is_closed(&mut stream).await, "a refused upstream leaves the dialer hanging");
        Ok(())
    }

    #[tokio::test]
    async fn upstream_sees_the_dialing_nodes_address() -> io::Result<()> {
        // The upstream listens on 127.0.0.1; the proxy dials from another loopback address,
        // as a node on 127.0.0.12 would.
        let listener = TcpListener::bind(any_port()).await?;
        let upstream = listener.local_addr()?;
        let source = "127.0.0.12".parse().expect("an IP address");
        let proxy = LinkProxy::start(any_port(), upstream, Some(source)).await?;
        let _dialer = TcpStream::connect(proxy.address()).await?;
        let (_accepted, peer) = tokio::time::timeout(ECHO_MAX, listener.accept()).await??;
        assert_eq!(peer.ip(), source);
        Ok(())
    }

    #[tokio::test]
    async fn a_door_forwards_from_the_dialers_address_and_cuts_one_dialer_alone() -> io::Result<()>
    {
        let listener = TcpListener::bind(any_port()).await?;
        let upstream = listener.local_addr()?;
        let door = LinkProxy::start_door(any_port(), upstream).await?;
        let dialer: IpAddr = "127.0.1.7".parse().expect("an IP address");
        let _from_seven = dial_from(dialer, door.address()).await?;
        let (_accepted, peer) = tokio::time::timeout(ECHO_MAX, listener.accept()).await??;
        assert_eq!(peer.ip(), dialer, "the upstream sees the dialer's own address");
        drop(listener);

        let (upstream, _server) = echo_server().await?;
        let door = LinkProxy::start_door(any_port(), upstream).await?;
        let (cut, kept): (IpAddr, IpAddr) =
            ("127.0.1.8".parse().expect("an IP"), "127.0.1.9".parse().expect("an IP"));
        let mut before = dial_from(cut, door.address()).await?;
        assert_eq!(round_trip(&mut before, b"hi", ECHO_MAX).await?.as_deref(), Some(&b"hi"[..]));
        let mut other = dial_from(kept, door.address()).await?;
        assert_eq!(round_trip(&mut other, b"yo", ECHO_MAX).await?.as_deref(), Some(&b"yo"[..]));

        door.cut_source(cut);
        assert_eq!(door.cut_sources(), vec![cut]);
        assert!(!door.is_blocked(), "cutting one source leaves the link open");
        assert!(is_closed(&mut before).await, "the cut dialer's connection stays open");
        let mut during = dial_from(cut, door.address()).await?;
        assert_eq!(round_trip(&mut during, b"x", SILENCE).await?, None, "a cut dialer got through");
        assert_eq!(
            round_trip(&mut other, b"still", ECHO_MAX).await?.as_deref(),
            Some(&b"still"[..]),
            "another dialer's connection was cut too"
        );

        door.restore_sources();
        assert!(door.cut_sources().is_empty());
        assert!(is_closed(&mut during).await, "a connection held while cut stays open");
        let mut after = dial_from(cut, door.address()).await?;
        assert_eq!(round_trip(&mut after, b"ok", ECHO_MAX).await?.as_deref(), Some(&b"ok"[..]));
        Ok(())
    }

    #[tokio::test]
    async fn bytes_read_once_a_link_stops_forwarding_are_dropped_not_written() {
        // The change of mode and the bytes sent after it can reach a connection's task in the
        // same wake-up, with the bytes read first: `forward` looks at the link before writing.
        let dialer: IpAddr = "127.0.1.10".parse().expect("an IP address");
        let cut = BTreeSet::from([dialer]);
        let states = [
            (State { mode: Mode::Open, cut: BTreeSet::new() }, true),
            (State { mode: Mode::Blocked, cut: BTreeSet::new() }, false),
            (State { mode: Mode::Open, cut }, false),
        ];
        for (state, forwards) in states {
            let (_sender, receiver) = watch::channel(state.clone());
            let mut from: &[u8] = b"after";
            let mut to = Vec::new();
            let forwarding = forward(&mut from, &mut to, &receiver, dialer);
            let ended = tokio::time::timeout(SILENCE, forwarding).await.is_ok();
            if forwards {
                assert!(ended, "an open link's copy did not end with its reader");
                assert_eq!(to, b"after", "an open link dropped bytes");
            } else {
                assert!(!ended, "{state:?}: the copy ended instead of waiting for the close");
                assert!(to.is_empty(), "{state:?}: {to:?} was forwarded");
            }
        }
    }

    /// A connection to `to` from address `from` (any port).
    async fn dial_from(from: IpAddr, to: SocketAddr) -> io::Result<TcpStream> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(from, 0))?;
        socket.connect(to).await
    }
}
