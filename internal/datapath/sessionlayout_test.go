package datapath

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf/btf"
)

// htabElemHeader is the kernel's struct htab_elem before the key (6.18: hash node 16, LRU node
// 24, hash 4, aligned to 8), and the key (struct ilnp_session_key) is 16 bytes: the value
// starts 64 bytes into the element, and the lookup reads the hash and key, bytes 40-63.
const (
	htabElemHeader = 48
	htabLookupFrom = 40
	cacheLine      = 64
)

// sessionLines is how many cache lines a packet touching [htabLookupFrom, value offset end)
// of an element that starts at phase within a line covers.
func sessionLines(phase, end uintptr) uintptr {
	from := phase + htabLookupFrom
	to := phase + htabElemHeader + unsafe.Sizeof(ilnpBPFIlnpSessionKey{}) + end
	return (to-1)/cacheLine - from/cacheLine + 1
}

// What a received packet on a session's main pair reads and writes (bpf/ilnp.c
// ilnp_ingress_ipv6, paths.h ilnp_pair_count) comes first in the entry, so that a busy
// correspondent's packet, which finds its entry cold, misses at most 4 lines of it at any
// phase the element may start at (entries are 264 bytes: every 8-byte phase occurs), where
// the order before took 4-5 (issue 28).
func TestSessionReceiveFieldsFirst(t *testing.T) {
	var s ilnpBPFIlnpSession
	pair := unsafe.Offsetof(s.Pair)
	end := func(off, size uintptr) uintptr { return off + size }
	recv := map[string]uintptr{
		"flags":                 end(unsafe.Offsetof(s.Flags), unsafe.Sizeof(s.Flags)),
		"remote_nonce_len":      end(unsafe.Offsetof(s.RemoteNonceLen), unsafe.Sizeof(s.RemoteNonceLen)),
		"remote_nonce":          end(unsafe.Offsetof(s.RemoteNonce), unsafe.Sizeof(s.RemoteNonce)),
		"local_view":            end(unsafe.Offsetof(s.LocalView), unsafe.Sizeof(s.LocalView)),
		"remote_view":           end(unsafe.Offsetof(s.RemoteView), unsafe.Sizeof(s.RemoteView)),
		"remote":                end(unsafe.Offsetof(s.Remote), unsafe.Sizeof(s.Remote)),
		"rx_packets":            end(unsafe.Offsetof(s.RxPackets), unsafe.Sizeof(s.RxPackets)),
		"last_rx_ns":            end(unsafe.Offsetof(s.LastRxNs), unsafe.Sizeof(s.LastRxNs)),
		"pair.local":            end(pair+unsafe.Offsetof(s.Pair.Local), unsafe.Sizeof(s.Pair.Local)),
		"pair.remote":           end(pair+unsafe.Offsetof(s.Pair.Remote), unsafe.Sizeof(s.Pair.Remote)),
		"pair.rx_packets":       end(pair+unsafe.Offsetof(s.Pair.RxPackets), unsafe.Sizeof(s.Pair.RxPackets)),
		"pair.rx_bytes":         end(pair+unsafe.Offsetof(s.Pair.RxBytes), unsafe.Sizeof(s.Pair.RxBytes)),
		"pair.last_rx":          end(pair+unsafe.Offsetof(s.Pair.LastRx), unsafe.Sizeof(s.Pair.LastRx)),
		"pair.unanswered":       end(pair+unsafe.Offsetof(s.Pair.Unanswered), unsafe.Sizeof(s.Pair.Unanswered)),
		"pair.first_unanswered": end(pair+unsafe.Offsetof(s.Pair.FirstUnanswered), unsafe.Sizeof(s.Pair.FirstUnanswered)),
	}
	var last uintptr
	for _, e := range recv {
		last = max(last, e)
	}
	// Only sent packets (and the daemon) use these: they must all come after.
	for name, off := range map[string]uintptr{
		"pair.last_tx":    pair + unsafe.Offsetof(s.Pair.LastTx),
		"pair.tx_packets": pair + unsafe.Offsetof(s.Pair.TxPackets),
		"pair.tx_bytes":   pair + unsafe.Offsetof(s.Pair.TxBytes),
		"local_locator":   unsafe.Offsetof(s.LocalLocator),
		"remote_active":   unsafe.Offsetof(s.RemoteActive),
		"tx_packets":      unsafe.Offsetof(s.TxPackets),
		"last_tx_ns":      unsafe.Offsetof(s.LastTxNs),
		"created_ns":      unsafe.Offsetof(s.CreatedNs),
	} {
		if off < last {
			t.Errorf("%s at byte %d, before the received packet's last field (ends at %d)", name, off, last)
		}
	}
	size := unsafe.Sizeof(s)
	if got := (htabElemHeader + unsafe.Sizeof(ilnpBPFIlnpSessionKey{}) + size) % 8; got != 0 {
		t.Fatalf("element size %% 8 = %d: the phases below assume 8-byte steps", got)
	}
	for phase := uintptr(0); phase < cacheLine; phase += 8 {
		if n := sessionLines(phase, last); n > 4 {
			t.Errorf("phase %d: a received packet touches %d lines of its element (fields up to byte %d)", phase, n, last)
		}
	}
	if n := sessionLines(0, size); n != 5 {
		t.Errorf("whole element at phase 0: %d lines, want 5 (the test's arithmetic is off)", n)
	}
}

// The entry's fields were put in another order with its size unchanged (issue 28): maps pinned
// by a daemon with the order before must be refused, which a hash over sizes alone did not do.
func TestLayoutSeesFieldOrder(t *testing.T) {
	spec, err := loadIlnpBPF()
	must(t, err)
	now := layoutOf(spec)
	before := map[string]btf.Bits{
		"local_view": 0, "remote_view": 64, "local_locator": 128, "remote_active": 192, "flags": 256,
		"local_nonce_len": 288, "remote_nonce_len": 296, "pad": 304, "local_nonce": 320,
		"remote_nonce": 416, "remote": 512, "tx_packets": 768, "rx_packets": 832, "last_tx_ns": 896,
		"last_rx_ns": 960, "created_ns": 1024, "pair": 1088,
	}
	pairBefore := map[string]btf.Bits{
		"local": 0, "remote": 64, "tx_packets": 128, "tx_bytes": 192, "rx_packets": 256,
		"rx_bytes": 320, "last_tx": 384, "last_rx": 416, "first_unanswered": 448, "unanswered": 480,
	}
	reorder := func(st *btf.Struct, offs map[string]btf.Bits) error {
		if len(st.Members) != len(offs) {
			return fmt.Errorf("%s has %d fields, the order before %d", st.Name, len(st.Members), len(offs))
		}
		for i, m := range st.Members {
			off, ok := offs[m.Name]
			if !ok {
				return fmt.Errorf("%s.%s not in the order before", st.Name, m.Name)
			}
			st.Members[i].Offset = off
		}
		return nil
	}
	for _, name := range []string{"sessions", "embryos"} {
		m := spec.Maps[name]
		st, ok := btf.Copy(m.Value).(*btf.Struct)
		if !ok {
			t.Fatalf("%s value %v is not a struct", name, m.Value)
		}
		must(t, reorder(st, before))
		for _, mb := range st.Members {
			if mb.Name == "pair" {
				p, ok := btf.UnderlyingType(mb.Type).(*btf.Struct)
				if !ok {
					t.Fatalf("pair is %v", mb.Type)
				}
				must(t, reorder(p, pairBefore))
			}
		}
		m.Value = st
	}
	old := layoutOf(spec)
	if old == now {
		t.Fatalf("layout %s the same with the session's fields in the order before", now)
	}
	requireLayoutRefused(t, old, "the session's fields in the order before")
}
