//! An accepted connection's stream as the HTTP and gRPC servers read it:
//! the stream, the connection's permit (held for as long as the stream
//! lives, past a WebSocket upgrade too) and a watcher told of every read.
//! Writes pass straight through.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::limits::Permit;
use crate::tls::Io;

/// What a listener watches on its connections' reads.
pub(crate) trait OnRead: Unpin {
    /// Called after each read of the stream with its result and the
    /// number of bytes it gave. An error returned ends the read with it
    /// (a deadline that passed while the read was pending, say).
    fn on_read(
        &mut self,
        cx: &mut Context<'_>,
        read: &Poll<std::io::Result<()>>,
        got: usize,
    ) -> Option<std::io::Error>;
}

pub(crate) struct Watched<W> {
    io: Io,
    pub(crate) watch: W,
    _permit: Permit,
}

impl<W> Watched<W> {
    pub(crate) fn new(io: Io, watch: W, permit: Permit) -> Watched<W> {
        Watched {
            io,
            watch,
            _permit: permit,
        }
    }
}

impl<W: OnRead> AsyncRead for Watched<W> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        let got = buf.filled().len() - before;
        match this.watch.on_read(cx, &read, got) {
            Some(e) => Poll::Ready(Err(e)),
            None => read,
        }
    }
}

impl<W: Unpin> AsyncWrite for Watched<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
