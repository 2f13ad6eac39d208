package control

import (
	"context"
	"errors"
	"os"
	"time"
)

// Flusher is a Handler that can stop for good: remove the datapath, its pins, routes,
// addresses and state, then exit (`ilnpctl flush`). A handler without it refuses the op.
// Flush accepts the request and returns what ends the daemon; the server calls it only after
// the reply is written, or the daemon could close the connection before the client hears yes.
type Flusher interface {
	Flush(ctx context.Context) (stop func(), err error)
}

// OpFlush asks the daemon to remove everything it set up and exit.
const OpFlush = "flush"

func handleFlush(ctx context.Context, h Handler) (stop func(), err error) {
	f, ok := h.(Flusher)
	if !ok {
		return nil, errors.New("this daemon cannot flush")
	}
	return f.Flush(ctx)
}

// Flush asks ilnpd to remove everything it set up (programs, pinned maps and links, routes,
// identity addresses, state file) and exit, and waits up to limit for its socket to go.
func (c Client) Flush(ctx context.Context, limit time.Duration) error {
	ctx2, cancel := c.timeout(ctx)
	defer cancel()
	_, _, conn, err := c.do(ctx2, Request{Op: OpFlush}, 0)
	if err != nil {
		return err
	}
	conn.Close()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(c.Socket); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("ilnpd accepted the flush but is still running after " + limit.String())
}
