package nstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// patternByte is byte off of the stream WritePattern sends: a period of 251 (prime) does not
// line up with any segment or chunk size, so a byte lost, repeated or moved shows.
func patternByte(off int64) byte { return byte(off % 251) }

// WritePattern writes the test stream to w in chunks of chunk bytes, one per every, until ctx
// ends (nil) or a write fails (the error).
func WritePattern(ctx context.Context, w io.Writer, chunk int, every time.Duration) error {
	buf := make([]byte, chunk)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var off int64
	for ctx.Err() == nil {
		for i := range buf {
			buf[i] = patternByte(off + int64(i))
		}
		if _, err := w.Write(buf); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("TCP write: %w", err)
		}
		off += int64(len(buf))
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	return nil
}

// ReadPattern reads the stream WritePattern writes from r, checking every byte and storing
// how many arrived in received, until EOF or ctx ends (nil) or a byte is wrong or a read fails
// (the error).
func ReadPattern(ctx context.Context, r io.Reader, received *atomic.Int64) error {
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, err := r.Read(buf)
		for i := range n {
			if buf[i] != patternByte(off+int64(i)) {
				return fmt.Errorf("TCP byte %d corrupted", off+int64(i))
			}
		}
		off += int64(n)
		received.Store(off)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("TCP read: %w", err)
		}
	}
}

// EchoUDP sends every datagram conn receives back to its sender until conn is closed.
func EchoUDP(conn net.PacketConn) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = conn.WriteTo(buf[:n], from)
	}
}

// EndPattern ends a WritePattern stream over conn once its writer was told to stop: it takes
// the writer's result from writeErr, half-closes conn so the reader sees EOF, and waits up to
// limit for the reader's result from readErr (ReadPattern's: it checked every byte).
func EndPattern(conn net.Conn, writeErr, readErr <-chan error, limit time.Duration) error {
	err := <-writeErr
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	select {
	case rerr := <-readErr:
		return errors.Join(err, rerr)
	case <-time.After(limit):
		return errors.Join(err, fmt.Errorf("the receiver did not see the end of the stream within %v", limit))
	}
}
