package nstest

import (
	"net"
	"os"
	"path/filepath"
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
	if err := ns.Do(func() error {
		conn, err := net.ListenPacket("udp6", "[::1]:9")
		if err != nil {
			return err
		}
		defer conn.Close()
		for range 3 { // to itself
			if _, err := conn.WriteTo(make([]byte, 100), conn.LocalAddr()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
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
