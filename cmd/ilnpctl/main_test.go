package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/control"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

type fake struct {
	mu       sync.Mutex
	handoff  config.Handoff
	tcpAware bool
	peer     string
	ilvs     []wire.RankedILV
}

func (f *fake) ShowLocators(context.Context) (any, error) {
	return []control.LocatorRow{
		{Iface: "mn-r2", Locator: "2001:0db8:0002:0000", Family: "ipv6", Address: "2001:db8:2:0:214:4fff:fe20:ee64", State: "active", Router: "fe80::1", ValidSecs: 600},
		{Iface: "mn-r3", Locator: "0000:c027:c633:6402", Family: "ipv4", Address: "0:c027:c633:6402:214:4fff:fe20:ee64", State: "valid", ValidSecs: 86400},
	}, nil
}
func (f *fake) ShowSessions(context.Context) (any, error) {
	return []control.SessionRow{{Peer: "cn", LocalNID: "0214:4fff:fe20:ee64", RemoteNID: "0014:4fff:ff20:ee64",
		LocalActive: "2001:0db8:0002:0000", RemoteActive: "2001:0db8:0001:0000",
		RemoteLocators: []string{"2001:0db8:0001:0000", "2001:0db8:0009:0000"}, IdleSecs: 3}}, nil
}
func (f *fake) ShowPeers(context.Context) (any, error) { return nil, nil }
func (f *fake) ShowStats(context.Context) (any, error) {
	return struct {
		LUSent   int `json:"lu_sent"`
		BadNonce int `json:"bad_nonce"`
	}{4, 1}, nil
}
func (f *fake) ShowConfig(context.Context) (any, error) {
	return map[string]string{"interfaces": "mn-r2 mn-r3", "handoff": "soft"}, nil
}
func (f *fake) Events(context.Context, bool) ([]timeline.Event, <-chan timeline.Event, func(), error) {
	return []timeline.Event{
		{MonoNS: 12_345_678_901, Kind: timeline.LUSent, Node: "mn", Peer: "cn", Attempt: 2},
		{MonoNS: 12_400_000_000, Kind: timeline.LUAckReceived, Node: "mn", Peer: "cn", Duration: 54_321_000, Detail: "rtt sample"},
	}, nil, nil, nil
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
	if name == "refuse" {
		return errors.New("peer table full")
	}
	f.peer, f.ilvs = name, ilvs
	return nil
}

func daemon(t *testing.T) (*fake, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := control.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- control.Serve(ctx, ln, f) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return f, sock
}

func ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestShowTable(t *testing.T) {
	_, sock := daemon(t)
	code, out, errOut := ctl(t, "-s", sock, "show", "locators")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "" +
		"IFACE  LOCATOR              FAMILY  ADDRESS                              STATE   ROUTER   VALID_S\n" +
		"mn-r2  2001:0db8:0002:0000  ipv6    2001:db8:2:0:214:4fff:fe20:ee64      active  fe80::1  600\n" +
		"mn-r3  0000:c027:c633:6402  ipv4    0:c027:c633:6402:214:4fff:fe20:ee64  valid   -        86400\n"
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	// Abbreviations, list cells.
	code, out, _ = ctl(t, "-s", sock, "sh", "sess")
	if code != 0 || !strings.Contains(out, "2001:0db8:0001:0000,2001:0db8:0009:0000") || !strings.HasPrefix(out, "PEER ") {
		t.Fatalf("sessions exit %d:\n%s", code, out)
	}
	code, out, _ = ctl(t, "-s", sock, "show", "stats")
	if code != 0 || out != "lu_sent    4\nbad_nonce  1\n" {
		t.Fatalf("stats exit %d: %q", code, out)
	}
	code, out, _ = ctl(t, "-s", sock, "show", "peers")
	if code != 0 || out != "" {
		t.Fatalf("peers exit %d: %q", code, out)
	}
	code, out, _ = ctl(t, "-s", sock, "show", "config")
	if code != 0 || out != "handoff     soft\ninterfaces  mn-r2 mn-r3\n" {
		t.Fatalf("config exit %d: %q", code, out)
	}
}

func TestShowJSON(t *testing.T) {
	_, sock := daemon(t)
	for _, what := range []string{"locators", "sessions", "peers", "stats", "config"} {
		code, out, errOut := ctl(t, "-s", sock, "-j", "show", what)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", what, code, errOut)
		}
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", what, err, out)
		}
	}
	_, out, _ := ctl(t, "-s", sock, "-j", "show", "locators")
	var rows []control.LocatorRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 || rows[1].State != "valid" {
		t.Fatalf("rows %+v %v", rows, err)
	}
}

func TestEventsOutput(t *testing.T) {
	_, sock := daemon(t)
	code, out, _ := ctl(t, "-s", sock, "events")
	want := "12.345678 lu_sent           node=mn peer=cn attempt=2\n" +
		"12.400000 lu_ack_received   node=mn peer=cn duration_ms=54.321 detail=\"rtt sample\"\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d\n%q\nwant\n%q", code, out, want)
	}
	code, out, _ = ctl(t, "-s", sock, "-j", "events")
	events, err := timeline.Read(strings.NewReader(out))
	if code != 0 || err != nil || len(events) != 2 || events[1].Duration != 54_321_000 {
		t.Fatalf("exit %d, %v, %+v", code, err, events)
	}
}

func TestSetAndPeer(t *testing.T) {
	f, sock := daemon(t)
	if code, _, errOut := ctl(t, "-s", sock, "set", "handoff", "hard"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if f.handoff != config.HandoffHard {
		t.Fatalf("handoff %q", f.handoff)
	}
	if code, _, errOut := ctl(t, "-s", sock, "set", "tcp-aware", "on"); code != 0 || !f.tcpAware {
		t.Fatalf("set tcp-aware on: exit %d: %s", code, errOut)
	}
	code, _, errOut := ctl(t, "-s", sock, "peer", "add", "cn",
		"2001:db8:1:0:14:4fff:ff20:ee64", "2001:db8:9::,0014:4fff:ff20:ee64", "2001:0db8:0005:0000|3,0014:4fff:ff20:ee64")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	nid := wire.NID(0x00144fff_ff20ee64)
	want := []wire.RankedILV{
		{ILV: wire.ILV{Locator: 0x20010db8_00010000, NID: nid}, Preference: 0},
		{ILV: wire.ILV{Locator: 0x20010db8_00090000, NID: nid}, Preference: 1},
		{ILV: wire.ILV{Locator: 0x20010db8_00050000, NID: nid}, Preference: 3},
	}
	if f.peer != "cn" || len(f.ilvs) != 3 {
		t.Fatalf("peer %q %+v", f.peer, f.ilvs)
	}
	for i := range want {
		if f.ilvs[i] != want[i] {
			t.Errorf("ilv %d = %+v, want %+v", i, f.ilvs[i], want[i])
		}
	}
	code, _, errOut = ctl(t, "-s", sock, "peer", "add", "refuse", "2001:db8::1")
	if code != 1 || !strings.Contains(errOut, "peer table full") {
		t.Fatalf("daemon error: exit %d: %s", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	_, sock := daemon(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"s"}, `unknown command "s"`}, // ambiguous: show, set
		{[]string{"show"}, "show: want one of"},
		{[]string{"show", "routes"}, `unknown table "routes"`},
		{[]string{"set", "handoff", "medium"}, "want soft or hard"},
		{[]string{"set", "mtu", "1400"}, `unknown setting "mtu"`},
		{[]string{"set", "tcp-aware", "maybe"}, "want on or off"},
		{[]string{"peer", "add", "cn"}, "peer add NAME ILV"},
		{[]string{"peer", "add", "cn", "not-an-ilv"}, "parse I-LV"},
		{[]string{"peer", "add", "cn", "2001:db8::|x,0014:4fff:ff20:ee64"}, "preference"},
		{[]string{"peer", "add", "cn", "2001:db8::1|3"}, "want L64|PREFERENCE,NID"},
		{[]string{"peer", "add", "cn", "2001:db8::"}, "NID is zero"},
		{[]string{"peer", "del", "cn", "2001:db8::1"}, `unknown subcommand "del"`},
		{[]string{"events", "--since", "5"}, `unknown argument "--since"`},
		{[]string{"-x", "show", "locators"}, "flag provided but not defined"},
	} {
		code, _, errOut := ctl(t, append([]string{"-s", sock}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "usage:") {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestDaemonNotRunning(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	code, _, errOut := ctl(t, "-s", sock, "show", "locators")
	if code != 1 || !strings.Contains(errOut, "ilnpd is not running") || !strings.Contains(errOut, sock) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := ctl(t, "-h")
	if code != 0 || !strings.Contains(out, "usage: ilnpctl") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

func FuzzRender(f *testing.F) {
	f.Add(`[{"a":1,"b":[1,2]},{"c":null}]`)
	f.Add(`{"x":"y","n":{"m":true}}`)
	f.Add(`"scalar"`)
	f.Fuzz(func(t *testing.T, in string) {
		v, err := decodeOrdered([]byte(in))
		if err != nil {
			return
		}
		if !json.Valid([]byte(in)) {
			t.Fatalf("decodeOrdered accepted invalid JSON %q", in)
		}
		var buf bytes.Buffer
		if err := render(&buf, v); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzParseILVs(f *testing.F) {
	f.Add("2001:db8::1")
	f.Add("2001:db8::,0014:4fff:ff20:ee64")
	f.Add("2001:0db8:0005:0000|3,0014:4fff:ff20:ee64")
	f.Fuzz(func(t *testing.T, in string) {
		ilvs, err := parseILVs([]string{in})
		if err != nil {
			return
		}
		// What ilnpctl sends must be accepted by the daemon side's parser.
		if _, err := wire.ParseILV(ilvs[0].ILV); err != nil {
			t.Fatalf("%q -> %q not parseable: %v", in, ilvs[0].ILV, err)
		}
	})
}
