package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

type fake struct {
	mu       sync.Mutex
	handoff  config.Handoff
	tcpAware bool
	peers    map[string][]wire.RankedILV
	tl       *timeline.Writer
	past     []timeline.Event
}

func (f *fake) ShowLocators(context.Context) (any, error) {
	return []LocatorRow{{Iface: "mn-r2", Locator: "2001:0db8:0002:0000", Address: "2001:db8:2::1", State: "active", ValidSecs: 600}}, nil
}
func (f *fake) ShowSessions(context.Context) (any, error) { return []SessionRow{}, nil }
func (f *fake) ShowPeers(context.Context) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rows []PeerRow
	for n, v := range f.peers {
		rows = append(rows, PeerRow{Name: n, NID: v[0].ILV.NID.String(), ILVs: []string{v[0].ILV.String()}})
	}
	return rows, nil
}
func (f *fake) ShowStats(context.Context) (any, error) {
	return nil, errors.New("stats unavailable")
}
func (f *fake) ShowConfig(context.Context) (any, error) {
	return map[string]string{"handoff": "soft"}, nil
}
func (f *fake) Events(_ context.Context, follow bool) ([]timeline.Event, <-chan timeline.Event, func(), error) {
	if !follow {
		return f.past, nil, nil, nil
	}
	ch, stop := f.tl.Subscribe(16)
	return f.past, ch, stop, nil
}
func (f *fake) SetHandoff(_ context.Context, m config.Handoff) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handoff = m
	return nil
}
func (f *fake) SetTCPAware(_ context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tcpAware = on
	return nil
}
func (f *fake) AddPeer(_ context.Context, name string, ilvs []wire.RankedILV) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peers[name] = ilvs
	return nil
}

func start(t *testing.T) (*fake, Client, context.CancelFunc, chan error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "run", "ctl.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{peers: map[string][]wire.RankedILV{}, tl: timeline.NewWriter(nil),
		past: []timeline.Event{{MonoNS: 1, Kind: timeline.RASeen, Iface: "mn-r2"}, {MonoNS: 2, Kind: timeline.LocatorAdded}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, f) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return")
		}
	})
	return f, Client{Socket: sock}, cancel, done
}

func TestShow(t *testing.T) {
	_, c, _, _ := start(t)
	data, err := c.Show(context.Background(), Locators)
	if err != nil {
		t.Fatal(err)
	}
	var rows []LocatorRow
	if err := json.Unmarshal(data, &rows); err != nil || len(rows) != 1 || rows[0].Iface != "mn-r2" || rows[0].ValidSecs != 600 {
		t.Fatalf("rows %+v err %v (%s)", rows, err, data)
	}
	data, err = c.Show(context.Background(), Sessions)
	if err != nil || string(data) != "[]" {
		t.Fatalf("sessions %s %v", data, err)
	}
	_, err = c.Show(context.Background(), Stats)
	var de *DaemonError
	if !errors.As(err, &de) || de.Msg != "show stats: stats unavailable" {
		t.Fatalf("err = %v", err)
	}
	_, err = c.Show(context.Background(), What("nonsense"))
	if !errors.As(err, &de) || !strings.Contains(de.Msg, `unknown table "nonsense"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestSetHandoffAndPeer(t *testing.T) {
	f, c, _, _ := start(t)
	ctx := context.Background()
	if err := c.SetHandoff(ctx, "hard"); err != nil {
		t.Fatal(err)
	}
	if f.handoff != config.HandoffHard {
		t.Fatalf("handoff %q", f.handoff)
	}
	var de *DaemonError
	if err := c.SetHandoff(ctx, "medium"); !errors.As(err, &de) || !strings.Contains(de.Msg, "want soft or hard") {
		t.Fatalf("err = %v", err)
	}
	if f.handoff != config.HandoffHard {
		t.Fatalf("bad request changed handoff to %q", f.handoff)
	}
	if err := c.SetTCPAware(ctx, "on"); err != nil || !f.tcpAware {
		t.Fatalf("set tcp-aware on: %v, state %v", err, f.tcpAware)
	}
	if err := c.SetTCPAware(ctx, "maybe"); !errors.As(err, &de) || !strings.Contains(de.Msg, "want on or off") || !f.tcpAware {
		t.Fatalf("set tcp-aware maybe: %v, state %v", err, f.tcpAware)
	}
	if err := c.SetTCPAware(ctx, "off"); err != nil || f.tcpAware {
		t.Fatalf("set tcp-aware off: %v, state %v", err, f.tcpAware)
	}

	err := c.AddPeer(ctx, "cn", []PeerILV{
		{ILV: "2001:db8:1:0:214:4fff:fe20:ee64", Preference: 0},
		{ILV: "2001:db8:5::,0214:4fff:fe20:ee64", Preference: 7},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := f.peers["cn"]
	want := []wire.RankedILV{
		{ILV: wire.ILV{Locator: 0x20010db8_00010000, NID: 0x02144fff_fe20ee64}},
		{ILV: wire.ILV{Locator: 0x20010db8_00050000, NID: 0x02144fff_fe20ee64}, Preference: 7},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("peer %+v", got)
	}
	for _, bad := range []struct {
		name string
		ilvs []PeerILV
		want string
	}{
		{"cn", nil, "no I-LVs"},
		{"", []PeerILV{{ILV: "2001:db8::1"}}, "peer name"},
		{"c n", []PeerILV{{ILV: "2001:db8::1"}}, "not allowed"},
		{"cn", []PeerILV{{ILV: "10.0.0.1"}}, "not an IPv6 address"},
		{"cn", []PeerILV{{ILV: "zzz"}}, "parse I-LV"},
	} {
		err := c.AddPeer(ctx, bad.name, bad.ilvs)
		if !errors.As(err, &de) || !strings.Contains(de.Msg, bad.want) {
			t.Errorf("AddPeer(%q, %v) = %v, want %q", bad.name, bad.ilvs, err, bad.want)
		}
	}
}

func TestEvents(t *testing.T) {
	f, c, _, _ := start(t)
	var got []timeline.Event
	if err := c.Events(context.Background(), false, func(e timeline.Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Kind != timeline.RASeen || got[1].Kind != timeline.LocatorAdded {
		t.Fatalf("events %+v", got)
	}

	// Follow: past events, then live ones as they are emitted.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live := make(chan timeline.Event, 10)
	errc := make(chan error, 1)
	go func() {
		errc <- c.Events(ctx, true, func(e timeline.Event) error { live <- e; return nil })
	}()
	for i := 0; i < 2; i++ {
		<-live
	}
	// The subscription starts when the request is served; emit until one arrives.
	var e timeline.Event
	deadline := time.After(5 * time.Second)
wait:
	for {
		f.tl.Emit(timeline.Event{Kind: timeline.LUSent, Peer: "cn", Attempt: 1})
		select {
		case e = <-live:
			break wait
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatal("no live event")
		}
	}
	if e.Kind != timeline.LUSent || e.Peer != "cn" || e.MonoNS == 0 {
		t.Fatalf("live event %+v", e)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Events after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Events did not return after cancel")
	}
}

// Daemon shutdown ends a following stream instead of hanging the client.
func TestServeShutdownEndsStreams(t *testing.T) {
	_, c, cancel, done := start(t)
	errc := make(chan error, 1)
	n := 0
	go func() {
		errc <- c.Events(context.Background(), true, func(timeline.Event) error { n++; return nil })
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream survived shutdown")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the cleanup
	if _, err := os.Stat(c.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func TestNotRunning(t *testing.T) {
	c := Client{Socket: filepath.Join(t.TempDir(), "ctl.sock")}
	if _, err := c.Show(context.Background(), Locators); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("err = %v", err)
	}
	// A stale socket file (daemon died) is also "not running", and Listen takes it over.
	ln, err := net.Listen("unix", c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := c.Show(context.Background(), Locators); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("stale socket: err = %v", err)
	}
	ln2, err := Listen(c.Socket)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	defer ln2.Close()
	if _, err := Listen(c.Socket); err == nil || !strings.Contains(err.Error(), "another ilnpd") {
		t.Fatalf("second Listen: %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	_, c, _, _ := start(t)
	for _, tc := range []struct{ req, want string }{
		{"not json\n", "bad request"},
		{`{"op":"reboot"}` + "\n", `unknown op "reboot"`},
		{`{"op":"show","what":"locators","extra":1}` + "\n", "unknown field"},
		{`{"op":"show"}`, "unknown table"}, // no newline: EOF ends the request
	} {
		conn, err := net.Dial("unix", c.Socket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte(tc.req)); err != nil {
			t.Fatal(err)
		}
		conn.(*net.UnixConn).CloseWrite()
		var resp Response
		if err := json.NewDecoder(conn).Decode(&resp); err != nil {
			t.Fatalf("%q: %v", tc.req, err)
		}
		conn.Close()
		if resp.OK || !strings.Contains(resp.Error, tc.want) {
			t.Errorf("%q: %+v, want error %q", tc.req, resp, tc.want)
		}
	}
	// An oversized request is refused, not buffered without bound.
	conn, err := net.Dial("unix", c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go conn.Write([]byte(`{"op":"show","what":"` + strings.Repeat("x", 2*maxRequest)))
	var resp Response
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewDecoder(conn).Decode(&resp); err == nil && resp.OK {
		t.Fatalf("oversized request accepted: %+v", resp)
	}
}

func FuzzRequest(f *testing.F) {
	f.Add([]byte(`{"op":"show","what":"locators"}`))
	f.Add([]byte(`{"op":"peer-add","name":"cn","ilvs":[{"ilv":"2001:db8::1","preference":3}]}`))
	f.Add([]byte(`{"op":"events","follow":true}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := decodeRequest(line)
		if err != nil {
			return
		}
		if req.Op == "peer-add" {
			ilvs, err := parsePeer(req)
			if err == nil && len(ilvs) != len(req.ILVs) {
				t.Fatalf("%d I-LVs from %d", len(ilvs), len(req.ILVs))
			}
		}
	})
}

func TestListenRefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("file replaced")
	}
}

// A socket path a Unix socket address cannot hold is refused with the reason, not bind's EINVAL.
func TestListenRefusesPathTooLong(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, strings.Repeat("d", 120-len(dir)), "ctl.sock")
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "longer than the 107") {
		t.Fatalf("Listen(%d-byte path) = %v, want the length refused", len(path), err)
	}
	short := filepath.Join(dir, "ctl.sock")
	ln, err := Listen(short)
	if err != nil {
		t.Fatalf("Listen(%s): %v", short, err)
	}
	ln.Close()
}

// streamed writes rows as a Streamer, one Write per row.
type streamed []SessionRow

func (s streamed) StreamJSON(w io.Writer) error {
	if _, err := io.WriteString(w, "["); err != nil {
		return err
	}
	for i, r := range s {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if i > 0 {
			b = append([]byte{','}, b...)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "]")
	return err
}

type streamingFake struct {
	*fake
	rows streamed
}

func (f streamingFake) ShowSessions(context.Context) (any, error) { return f.rows, nil }

// A Streamer's table reaches the client as the same value a slice of rows would (the
// response spans many of the server's writes).
func TestShowStreamed(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	rows := make(streamed, 5000)
	for i := range rows {
		rows[i] = SessionRow{Peer: wire.NID(i + 1).String(), LocalActive: "<active>", RemoteLocators: []string{"a&b"}, IdleSecs: int64(i)}
	}
	f := streamingFake{fake: &fake{peers: map[string][]wire.RankedILV{}, tl: timeline.NewWriter(nil)}, rows: rows}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, f) }()
	defer func() {
		cancel()
		<-done
	}()
	data, err := Client{Socket: sock}.Show(context.Background(), Sessions)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal([]SessionRow(rows))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want) {
		t.Fatalf("streamed %d bytes, want the %d of the whole table", len(data), len(want))
	}
}

// A table that takes longer than Timeout to arrive whole, but never pauses that long, is read
// (a million sessions' listing); a daemon silent for longer than Timeout fails the call.
func TestShowTimeoutIsIdle(t *testing.T) {
	c := Client{Socket: filepath.Join(t.TempDir(), "ctl.sock"), Timeout: 400 * time.Millisecond}
	ln, err := net.Listen("unix", c.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serve := func(pause time.Duration, chunks int) {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		readRequestLine(conn)
		io.WriteString(conn, `{"ok":true,"data":[0`)
		for range chunks {
			time.Sleep(pause)
			if _, err := io.WriteString(conn, `,0`); err != nil {
				return
			}
		}
		io.WriteString(conn, "]}\n")
	}
	// 12 pauses of 100 ms: 1.2 s in all, three times the timeout.
	go serve(100*time.Millisecond, 12)
	data, err := c.Show(context.Background(), Sessions)
	if err != nil {
		t.Fatalf("a listing that keeps coming: %v", err)
	}
	var rows []int
	if err := json.Unmarshal(data, &rows); err != nil || len(rows) != 13 {
		t.Fatalf("rows %v (%v), want 13", rows, err)
	}
	// One pause of 2 s: five times the timeout.
	go serve(2*time.Second, 1)
	if _, err := c.Show(context.Background(), Sessions); err == nil {
		t.Fatal("a daemon silent for 2 s answered within a 400-ms timeout")
	}
}

// readRequestLine reads the request line.
func readRequestLine(r io.Reader) {
	b := make([]byte, 1)
	for {
		if n, err := r.Read(b); err != nil || (n == 1 && b[0] == '\n') {
			return
		}
	}
}
