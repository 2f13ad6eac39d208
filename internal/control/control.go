// Package control is the protocol between ilnpctl and ilnpd: JSON over a unix stream socket
// (default /run/ilnpd/ctl.sock), one request per connection.
//
// Why a socket rather than ilnpctl reading the pinned BPF maps: much of the ILNP Communication
// Cache lives only in the daemon (remote locator states and lifetimes, LU retransmission state,
// names of peers, handoff mode), a few things change it (set handoff, peer add) and must go
// through the daemon's state machine rather than around it, and events are a stream that only
// the daemon sees as it happens. The socket is root-only (0600), as the maps would be.
//
// Wire format. The client writes one request line:
//
//	{"op":"show","what":"locators"}              what: locators | sessions | peers | stats | config
//	{"op":"events","follow":true}
//	{"op":"set-handoff","mode":"hard"}
//	{"op":"set-tcp-aware","mode":"on"}
//	{"op":"set-policy","policy":"quality"}                   (also "what":"paths" for show)
//	{"op":"peer-add","name":"cn","ilvs":[{"ilv":"2001:db8:1:0:214:4fff:fe20:ee64","preference":10}]}
//
// and reads response lines: {"ok":true,"data":...} or {"ok":false,"error":"reason"}; for
// "events" the first line is {"ok":true}, then one {"event":{...}} line per event (past events
// first), until the daemon ends the stream (without --follow: after the past events).
package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// DefaultSocket is where ilnpd listens unless its state-dir says otherwise.
const DefaultSocket = "/run/ilnpd/ctl.sock"

// What names a table for "show".
type What string

const (
	Locators What = "locators"
	Sessions What = "sessions"
	Peers    What = "peers"
	Stats    What = "stats"
	Config   What = "config"
	Paths    What = "paths"
)

// Whats lists the tables in the order ilnpctl documents them.
var Whats = []What{Locators, Sessions, Peers, Stats, Config, Paths}

// PathHandler is implemented by daemons with path liveness (issue 16): `show paths` and
// `set policy`. A Handler without it answers those requests with an error.
type PathHandler interface {
	ShowPaths(ctx context.Context) (any, error)
	SetPolicy(ctx context.Context, name string) error
}

// Handler is what the daemon implements. Show results must marshal to JSON; ilnpctl prints a
// slice of structs as a table (columns in field order, named by the json tags), a struct or
// map of scalars as "name value" lines. LocatorRow, SessionRow, PeerRow show the intended shape.
// Methods are called concurrently from connection goroutines.
type Handler interface {
	ShowLocators(ctx context.Context) (any, error)
	ShowSessions(ctx context.Context) (any, error)
	ShowPeers(ctx context.Context) (any, error)
	ShowStats(ctx context.Context) (any, error)
	// ShowConfig is the configuration in effect (after any reload), key -> value as in the file.
	ShowConfig(ctx context.Context) (any, error)
	// Events returns the events recorded so far (may be nil) and, when follow is set, a
	// channel of later events plus a stop function that ends the subscription and closes the
	// channel (timeline.Writer.Subscribe fits). Without follow, live and stop may be nil.
	Events(ctx context.Context, follow bool) (past []timeline.Event, live <-chan timeline.Event, stop func(), err error)
	SetHandoff(ctx context.Context, mode config.Handoff) error
	// SetTCPAware switches the mobility-aware TCP reactions (issue 15).
	SetTCPAware(ctx context.Context, on bool) error
	AddPeer(ctx context.Context, name string, ilvs []wire.RankedILV) error
}

// LocatorRow is a suggested row for ShowLocators.
type LocatorRow struct {
	Iface   string `json:"iface"`
	Locator string `json:"locator"` // L64 in RFC 6742 form
	// Family is ipv6, or ipv4 for an IPv4 locator (0x0000 | UDP port | IPv4 address, issue 14).
	Family    string `json:"family"`
	Address   string `json:"address"`
	State     string `json:"state"` // active | valid | aged | expired (RFC 6741 s.5)
	Router    string `json:"router,omitempty"`
	ValidSecs int64  `json:"valid_s"`
}

// SessionRow is a suggested row for ShowSessions.
type SessionRow struct {
	Peer           string   `json:"peer"`
	LocalNID       string   `json:"local_nid"`
	RemoteNID      string   `json:"remote_nid"`
	LocalActive    string   `json:"local_active"`
	RemoteActive   string   `json:"remote_active"`
	RemoteLocators []string `json:"remote_locators"`
	IdleSecs       int64    `json:"idle_s"`
}

// PeerRow is a suggested row for ShowPeers.
type PeerRow struct {
	Name string   `json:"name"`
	NID  string   `json:"nid"`
	ILVs []string `json:"ilvs"`
}

// PeerILV is an I-LV in a peer-add request.
type PeerILV struct {
	ILV        string `json:"ilv"` // IPv6 address or L64,NID (wire.ParseILV)
	Preference uint16 `json:"preference"`
}

// Request is one client request.
type Request struct {
	Op     string    `json:"op"`
	What   What      `json:"what,omitempty"`
	Follow bool      `json:"follow,omitempty"`
	Mode   string    `json:"mode,omitempty"`
	Policy string    `json:"policy,omitempty"`
	Name   string    `json:"name,omitempty"`
	ILVs   []PeerILV `json:"ilvs,omitempty"`
}

// Response is one response line.
type Response struct {
	OK    bool            `json:"ok"`
	Error string          `json:"error,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
	Event *timeline.Event `json:"event,omitempty"`
}

const (
	maxRequest   = 64 * 1024
	writeTimeout = 5 * time.Second
)

// maxSocketPath is the longest path a Unix socket address holds (sun_path: 108 bytes with the
// terminating NUL); bind reports only EINVAL past it.
const maxSocketPath = 107

// Listen creates the socket at path (and its directory, 0700), replacing a stale socket left
// by a daemon that died but refusing to take over one that still answers.
func Listen(path string) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("control socket %s: %d bytes, longer than the %d a Unix socket address holds (choose a shorter state-dir)", path, len(path), maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("control socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another ilnpd is listening", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket: remove stale %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Unlink the socket file on Close (the default for net.Listen'd unix sockets).
	return ln, nil
}

// Serve answers requests on ln until ctx is done, then closes ln, waits for open connections
// to finish (event streams are ended) and returns nil. Other accept errors are returned.
func Serve(ctx context.Context, ln net.Listener, h Handler) error {
	return ServeWithLogger(ctx, ln, h, slog.Default())
}

// ServeWithLogger is Serve with a logger for per-connection errors.
func ServeWithLogger(ctx context.Context, ln net.Listener, h Handler, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("control: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serveConn(ctx, conn, h); err != nil && !errors.Is(err, syscall.EPIPE) {
				log.Debug("control connection", "err", err)
			}
		}()
	}
}

// Streamer is a show table that writes itself, a JSON value, to the connection as it goes: a
// listing of 100,000 sessions need not be in the daemon's memory whole (issue 28).
type Streamer interface {
	StreamJSON(w io.Writer) error
}

// sendStream writes the Response a Streamer's value makes, byte for byte what encoding it
// whole writes, each write with its own deadline. An error midway leaves the client a
// truncated line, which it reports.
func sendStream(conn net.Conn, st Streamer) error {
	w := bufio.NewWriterSize(deadlineWriter{conn}, 64<<10)
	w.WriteString(`{"ok":true,"data":`)
	if err := st.StreamJSON(w); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	w.WriteString("}\n")
	return w.Flush()
}

// deadlineWriter gives every write writeTimeout.
type deadlineWriter struct{ conn net.Conn }

func (d deadlineWriter) Write(b []byte) (int, error) {
	_ = d.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	return d.conn.Write(b)
}

func serveConn(ctx context.Context, conn net.Conn, h Handler) error {
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A closed connection or daemon shutdown ends a long-running request (events --follow).
	go func() {
		<-ctx.Done()
		conn.Close()
	}()

	enc := json.NewEncoder(conn)
	send := func(r Response) error {
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		return enc.Encode(r)
	}
	fail := func(format string, args ...any) error {
		return send(Response{Error: fmt.Sprintf(format, args...)})
	}

	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReaderSize(&limitedReader{conn, maxRequest}, 4096).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return fmt.Errorf("read request: %w", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	req, err := decodeRequest(line)
	if err != nil {
		return fail("bad request: %v", err)
	}

	switch req.Op {
	case "show":
		var (
			v   any
			err error
		)
		switch req.What {
		case Locators:
			v, err = h.ShowLocators(ctx)
		case Sessions:
			v, err = h.ShowSessions(ctx)
		case Peers:
			v, err = h.ShowPeers(ctx)
		case Stats:
			v, err = h.ShowStats(ctx)
		case Config:
			v, err = h.ShowConfig(ctx)
		case Paths:
			ph, ok := h.(PathHandler)
			if !ok {
				return fail("show paths: this daemon has no path liveness")
			}
			v, err = ph.ShowPaths(ctx)
		default:
			return fail("show: unknown table %q (want locators, sessions, peers, stats or config)", req.What)
		}
		if err != nil {
			return fail("show %s: %v", req.What, err)
		}
		if st, ok := v.(Streamer); ok {
			return sendStream(conn, st)
		}
		data, err := json.Marshal(v)
		if err != nil {
			return fail("show %s: %v", req.What, err)
		}
		return send(Response{OK: true, Data: data})

	case "set-handoff":
		mode, err := config.ParseHandoff(req.Mode)
		if err != nil {
			return fail("set handoff: %v", err)
		}
		if err := h.SetHandoff(ctx, mode); err != nil {
			return fail("set handoff: %v", err)
		}
		return send(Response{OK: true})

	case "set-tcp-aware":
		if req.Mode != "on" && req.Mode != "off" {
			return fail("set tcp-aware: want on or off, got %q", req.Mode)
		}
		if err := h.SetTCPAware(ctx, req.Mode == "on"); err != nil {
			return fail("set tcp-aware: %v", err)
		}
		return send(Response{OK: true})

	case "set-policy":
		ph, ok := h.(PathHandler)
		if !ok {
			return fail("set policy: not supported by this daemon")
		}
		if err := ph.SetPolicy(ctx, req.Policy); err != nil {
			return fail("set policy: %v", err)
		}
		return send(Response{OK: true})

	case "peer-add":
		ilvs, err := parsePeer(req)
		if err != nil {
			return fail("peer add: %v", err)
		}
		if err := h.AddPeer(ctx, req.Name, ilvs); err != nil {
			return fail("peer add: %v", err)
		}
		return send(Response{OK: true})

	case OpFlush:
		stop, err := handleFlush(ctx, h)
		if err != nil {
			return fail("flush: %v", err)
		}
		err = send(Response{OK: true})
		stop()
		return err

	case "events":
		past, live, stop, err := h.Events(ctx, req.Follow)
		if err != nil {
			return fail("events: %v", err)
		}
		if stop != nil {
			defer stop()
		}
		if err := send(Response{OK: true}); err != nil {
			return err
		}
		for i := range past {
			if err := send(Response{OK: true, Event: &past[i]}); err != nil {
				return err
			}
		}
		if !req.Follow || live == nil {
			return nil
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case e, ok := <-live:
				if !ok {
					return nil
				}
				if err := send(Response{OK: true, Event: &e}); err != nil {
					return err
				}
			}
		}
	}
	return fail("unknown op %q (want show, events, set-handoff, set-tcp-aware, set-policy, peer-add or flush)", req.Op)
}

// decodeRequest reads one request line strictly: unknown fields are errors, so a newer
// ilnpctl talking to an older ilnpd gets a clear refusal rather than a half-done request.
func decodeRequest(line []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return Request{}, err
	}
	if dec.More() {
		return Request{}, errors.New("more than one request on the line")
	}
	return req, nil
}

func parsePeer(req Request) ([]wire.RankedILV, error) {
	if err := checkPeerName(req.Name); err != nil {
		return nil, err
	}
	if len(req.ILVs) == 0 {
		return nil, errors.New("no I-LVs")
	}
	out := make([]wire.RankedILV, 0, len(req.ILVs))
	for _, p := range req.ILVs {
		v, err := wire.ParseILV(p.ILV)
		if err != nil {
			return nil, err
		}
		out = append(out, wire.RankedILV{ILV: v, Preference: p.Preference})
	}
	return out, nil
}

func checkPeerName(n string) error {
	if n == "" || len(n) > 253 {
		return fmt.Errorf("peer name %q: want 1 to 253 characters", n)
	}
	for _, c := range []byte(n) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		default:
			return fmt.Errorf("peer name %q: character %q not allowed", n, c)
		}
	}
	return nil
}

// limitedReader fails instead of silently truncating an oversized request.
type limitedReader struct {
	c net.Conn
	n int
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too large")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.c.Read(p)
	l.n -= n
	return n, err
}
