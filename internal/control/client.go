package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"ilnp/internal/timeline"
)

// ErrNotRunning means nothing listens on the socket: ilnpd is not running (or uses another
// state-dir).
var ErrNotRunning = errors.New("ilnpd is not running")

// Client talks to ilnpd. Each call opens its own connection.
type Client struct {
	Socket string
	// Timeout bounds a request, not an event stream; default 5 s. A table (Show) may take
	// longer to arrive whole (a million sessions' listing), so there it bounds the silence
	// between two reads instead.
	Timeout time.Duration
}

// DaemonError is an error the daemon reported (as opposed to a transport failure).
type DaemonError struct{ Msg string }

func (e *DaemonError) Error() string { return "ilnpd: " + e.Msg }

func (c Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (no one listens on %s)", ErrNotRunning, c.Socket)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%s: permission denied (ilnpctl needs root)", c.Socket)
		}
		return nil, fmt.Errorf("connect to ilnpd at %s: %w", c.Socket, err)
	}
	return conn, nil
}

// do sends req and returns the first response line; the caller reads further lines from r.
// idle > 0 fails a read that waits longer than that for data.
func (c Client) do(ctx context.Context, req Request, idle time.Duration) (Response, *bufio.Reader, net.Conn, error) {
	dctx := ctx
	if idle > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, idle)
		defer cancel()
	}
	conn, err := c.dial(dctx)
	if err != nil {
		return Response{}, nil, nil, err
	}
	// Cancelling ctx unblocks reads (a following event stream, a hung daemon).
	context.AfterFunc(ctx, func() { conn.Close() })
	line, _ := json.Marshal(req)
	if idle > 0 {
		_ = conn.SetWriteDeadline(time.Now().Add(idle))
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		conn.Close()
		return Response{}, nil, nil, fmt.Errorf("send request: %w", err)
	}
	var rd io.Reader = conn
	if idle > 0 {
		rd = idleReader{conn, idle}
	}
	r := bufio.NewReaderSize(rd, 64*1024)
	resp, err := readResponse(r)
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return Response{}, nil, nil, ctx.Err()
		}
		return Response{}, nil, nil, err
	}
	if !resp.OK {
		conn.Close()
		return Response{}, nil, nil, &DaemonError{Msg: resp.Error}
	}
	return resp, r, conn, nil
}

// idleReader fails a read that waits longer than idle for data.
type idleReader struct {
	conn net.Conn
	idle time.Duration
}

func (r idleReader) Read(b []byte) (int, error) {
	_ = r.conn.SetReadDeadline(time.Now().Add(r.idle))
	return r.conn.Read(b)
}

func readResponse(r *bufio.Reader) (Response, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return Response{}, io.EOF
		}
		if !errors.Is(err, io.EOF) {
			return Response{}, fmt.Errorf("read response: %w", err)
		}
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("bad response from ilnpd: %w", err)
	}
	return resp, nil
}

func (c Client) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.limit())
}

// limit is Timeout or its default.
func (c Client) limit() time.Duration {
	if c.Timeout == 0 {
		return 5 * time.Second
	}
	return c.Timeout
}

// Show returns the JSON the daemon produced for a table.
func (c Client) Show(ctx context.Context, what What) (json.RawMessage, error) {
	resp, _, conn, err := c.do(ctx, Request{Op: "show", What: what}, c.limit())
	if err != nil {
		return nil, err
	}
	conn.Close()
	return resp.Data, nil
}

// SetHandoff switches the handoff mode ("soft" or "hard").
func (c Client) SetHandoff(ctx context.Context, mode string) error {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	_, _, conn, err := c.do(ctx, Request{Op: "set-handoff", Mode: mode}, 0)
	if err != nil {
		return err
	}
	return conn.Close()
}

// SetTCPAware switches the mobility-aware TCP reactions ("on" or "off").
func (c Client) SetTCPAware(ctx context.Context, mode string) error {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	_, _, conn, err := c.do(ctx, Request{Op: "set-tcp-aware", Mode: mode}, 0)
	if err != nil {
		return err
	}
	return conn.Close()
}

// SetPolicy switches the handoff policy by name (newest, preference, quality).
func (c Client) SetPolicy(ctx context.Context, name string) error {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	_, _, conn, err := c.do(ctx, Request{Op: "set-policy", Policy: name}, 0)
	if err != nil {
		return err
	}
	return conn.Close()
}

// AddPeer registers name with its I-LVs.
func (c Client) AddPeer(ctx context.Context, name string, ilvs []PeerILV) error {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	_, _, conn, err := c.do(ctx, Request{Op: "peer-add", Name: name, ILVs: ilvs}, 0)
	if err != nil {
		return err
	}
	return conn.Close()
}

// Events calls fn for each event: the past ones, then (follow) live ones until ctx ends or the
// daemon closes the stream. An error from fn stops the stream and is returned.
func (c Client) Events(ctx context.Context, follow bool, fn func(timeline.Event) error) error {
	_, r, conn, err := c.do(ctx, Request{Op: "events", Follow: follow}, 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	for {
		resp, err := readResponse(r)
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !resp.OK {
			return &DaemonError{Msg: resp.Error}
		}
		if resp.Event == nil {
			continue
		}
		if err := fn(*resp.Event); err != nil {
			return err
		}
	}
}
