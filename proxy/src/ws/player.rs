//! A player on a WebSocket, as the session stages see it: [`Player`] over [`WsLink`].

use std::future::Future;
use std::io;

use bytes::BytesMut;
use moonbridge_protocol::ws as carriage;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::relay::ws::WsLink;
use crate::relay::{BackendSide, PlayerGone, RelayReport, RelayStart};
use crate::session::{Finish, Player};

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Player for WsLink<S> {
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        self.read_stream(buf).await
    }

    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.send_binary(bytes).await
    }

    async fn during<T>(&mut self, work: impl Future<Output = T>) -> Result<T, PlayerGone> {
        WsLink::during(self, work).await
    }

    async fn finish(&mut self, how: Finish) {
        let (code, reason) = match how {
            Finish::Normal => (carriage::CLOSE_NORMAL, ""),
            Finish::Shutdown => (carriage::CLOSE_GOING_AWAY, "proxy shutting down"),
            Finish::ProtocolError => (carriage::CLOSE_PROTOCOL_ERROR, "protocol error"),
            Finish::BackendUnavailable => (carriage::CLOSE_INTERNAL_ERROR, "server unavailable"),
        };
        // A fault earned by bad input takes precedence (WsLink::close).
        self.close(code, reason).await;
    }

    fn message_counts(&self) -> Option<(u64, u64)> {
        Some((self.messages_in, self.messages_out))
    }

    async fn relay(&mut self, mut backend: BackendSide, mut start: RelayStart<'_>) -> RelayReport {
        let report = match start.resume.take() {
            // Carriage v2 with resume on: the relay that survives a dropped connection.
            Some(resume) if self.v2 => Box::pin(self.relay_resumable(&mut backend, start, *resume)).await,
            _ => WsLink::relay(self, &mut backend, start).await,
        };
        if let Some(task) = backend.close() {
            let _ = task.await;
        }
        report
    }
}
