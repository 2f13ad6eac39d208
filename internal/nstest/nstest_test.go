package nstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

func TestIfindexAndCapture(t *testing.T) {
	RequireTool(t, "tcpdump")
	ns := New(t, "nstest")
	if idx := ns.Ifindex("lo"); idx != 1 {
		t.Fatalf("Ifindex(lo) = %d, want 1", idx)
	}
	file := filepath.Join(t.TempDir(), "lo.pcap")
	c := ns.Capture("lo", file, "udp port 9")
	conn := ns.ListenPacket("udp6", "[::1]:9")
	defer conn.Close()
	for range 3 { // to itself
		if _, err := conn.WriteTo(make([]byte, 100), conn.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	// libpcap hands packets over in blocks at least every second (no immediate mode), and
	// tcpdump drops what it has not read yet when it stops.
	time.Sleep(1500 * time.Millisecond)
	c.Stop()
	c.Stop() // harmless
	b, err := os.ReadFile(c.File)
	if err != nil {
		t.Fatal(err)
	}
	// Header, then 3 records: 16-byte record header, 4-byte loopback header (DLT_NULL) or
	// 14-byte Ethernet one, IPv6, UDP, 100 bytes of data.
	if len(b) < 24+3*(16+4+40+8+100) {
		t.Fatalf("capture of %d bytes, want the 3 datagrams", len(b))
	}
}

// Sockets made by Listen and Dial live in the namespace: the listener's port is reachable only
// from inside it.
func TestListenDial(t *testing.T) {
	ns := New(t, "nstest")
	ln := ns.Listen("tcp6", "[::1]:0")
	defer ln.Close()
	c := ns.Dial("tcp6", ln.Addr().String())
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := s.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v", buf, err)
	}
	if c, err := net.DialTimeout("tcp6", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatalf("%v reachable from outside the namespace", ln.Addr())
	}
}

func TestPatternRoundTrip(t *testing.T) {
	r, w := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	var got atomic.Int64
	done := make(chan error, 1)
	go func() { done <- ReadPattern(ctx, r, &got) }()
	go func() {
		_ = WritePattern(ctx, w, 1000, time.Millisecond)
		w.Close()
	}()
	for got.Load() < 10_000 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("clean stream: %v", err)
	}
	// One byte out of place is found at its offset.
	bad := make([]byte, 600)
	for i := range bad {
		bad[i] = patternByte(int64(i))
	}
	bad[517]++
	if err := ReadPattern(context.Background(), bytes.NewReader(bad), &got); err == nil || err.Error() != "TCP byte 517 corrupted" {
		t.Fatalf("corrupted stream: %v", err)
	}
}

// recorder stands in for a test to see what Require does.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

// A missing requirement skips outside CI and fails under CI; a present one does neither.
func TestRequire(t *testing.T) {
	missing := errors.New("not mounted")
	for _, c := range []struct {
		ci           string
		err          error
		skip, failed bool
	}{{"", missing, true, false}, {"true", missing, false, true}, {"true", nil, false, false}, {"", nil, false, false}} {
		t.Setenv("CI", c.ci)
		r := &recorder{TB: t}
		Require(r, "bpffs", c.err)
		if (r.skipped != "") != c.skip || (r.failed != "") != c.failed {
			t.Errorf("CI=%q err=%v: skipped %q failed %q", c.ci, c.err, r.skipped, r.failed)
		}
	}
}
