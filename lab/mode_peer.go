package lab

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/measure"
	"ilnp/lab/netns"
	"ilnp/lab/pcap"
)

// What the peers (modes mptcp and wireguard, issue 26: the alternatives users pick today,
// not written here) need from a run beyond the Mode interface. Each is optional: modes
// without it run as before.

// appWrapper is a mode that starts the applications through a launcher (mptcpize run).
type appWrapper interface{ WrapApp(args []string) []string }

func wrapApp(m Mode, args []string) []string {
	if w, ok := m.(appWrapper); ok {
		return w.WrapApp(args)
	}
	return args
}

// resultAdjuster is a mode that corrects the measurement after it was computed (e.g. its
// handoff signal is not an LU, so lu_sent does not apply).
type resultAdjuster interface{ AdjustResult(r *measure.Result) }

func adjustResult(m Mode, r *measure.Result) {
	if a, ok := m.(resultAdjuster); ok {
		a.AdjustResult(r)
	}
}

// ErrMPTCPUDP is why mode mptcp refuses UDP traffic.
var ErrMPTCPUDP = errors.New("MPTCP carries TCP only")

// peerTrafficError says whether a peer mode can carry the traffic at all.
func peerTrafficError(mode, traffic string) error {
	if mode == "mptcp" && Traffics[traffic].UDP {
		return fmt.Errorf("mode mptcp, traffic %s: %w", traffic, ErrMPTCPUDP)
	}
	return nil
}

// PeerInfo is what a peer mode writes next to a repetition's captures (rep-N/peer.json):
// how it was configured and what it measured on the wire that the summary has no field for.
type PeerInfo struct {
	Mode string `json:"mode"`
	// OverheadBytesPerPacket: bytes a CN -> MN data packet carried on the MN's access link
	// beyond what the same packet carries in plain IPv6 (mean over the flow's packets).
	OverheadBytesPerPacket *float64 `json:"overhead_bytes_per_packet"`
	OverheadPackets        int      `json:"overhead_packets"`
	OverheadHow            string   `json:"overhead_how"`
	// Handoff: what started it and what ended it (handoff_delay_ms in result.json).
	HandoffFrom string `json:"handoff_from"`
	HandoffTo   string `json:"handoff_to"`
	// Keepalive says whether a persistent keepalive ran, where, and why.
	Keepalive string   `json:"keepalive,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// ReadPeerInfo reads rep-N/peer.json.
func ReadPeerInfo(path string) (PeerInfo, error) {
	var p PeerInfo
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	return p, json.Unmarshal(b, &p)
}

// rawPacket is one record's IPv6 packet as captured (b starts at the IPv6 header).
type rawPacket struct {
	pkt pcap.Packet // decoded (pcap.Decode)
	rec []byte      // the whole record, link header included: edits go to the file
	ip  int         // offset of the IPv6 header in rec
	lt  uint32
}

// tcpHeader is the TCP header of a packet without extension headers, or nil.
func (r *rawPacket) tcpHeader() []byte {
	b := r.rec[r.ip:]
	if len(b) < 60 || b[0]>>4 != 6 || b[6] != pcap.ProtoTCP {
		return nil
	}
	t := b[40:]
	off := int(t[12]>>4) * 4
	if off < 20 || len(t) < off {
		return nil
	}
	return t[:off]
}

// ipLen is the packet's IPv6 length (header + payload) as its header says.
func (r *rawPacket) ipLen() int {
	b := r.rec[r.ip:]
	if len(b) < 40 {
		return 0
	}
	return 40 + int(binary.BigEndian.Uint16(b[4:]))
}

// filterPcapFile copies in to out, passing every IPv6 record to fn, which may edit it and
// says whether to keep it; other records are kept as they are. Returns how many were
// dropped.
func filterPcapFile(in, out string, fn func(*rawPacket) bool) (int, error) {
	data, err := os.ReadFile(in)
	if err != nil {
		return 0, err
	}
	res, n, err := filterPcap(data, fn)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", in, err)
	}
	return n, os.WriteFile(out, res, 0o644)
}

// eachPcapPacket passes every IPv6 record of a capture file to fn (read only).
func eachPcapPacket(path string, fn func(*rawPacket)) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, _, err = filterPcap(data, func(r *rawPacket) bool { fn(r); return true })
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func filterPcap(data []byte, fn func(*rawPacket) bool) ([]byte, int, error) {
	if len(data) < 24 {
		return nil, 0, errors.New("pcap: no file header")
	}
	var bo binary.ByteOrder
	nano := false
	switch {
	case binary.LittleEndian.Uint32(data) == 0xa1b2c3d4:
		bo = binary.LittleEndian
	case binary.BigEndian.Uint32(data) == 0xa1b2c3d4:
		bo = binary.BigEndian
	case binary.LittleEndian.Uint32(data) == 0xa1b23c4d:
		bo, nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(data) == 0xa1b23c4d:
		bo, nano = binary.BigEndian, true
	default:
		return nil, 0, fmt.Errorf("pcap: magic %#x", binary.LittleEndian.Uint32(data))
	}
	lt := bo.Uint32(data[20:]) & 0x0fffffff
	lh, ok := linkHeaders[lt]
	if !ok {
		return nil, 0, fmt.Errorf("pcap: link type %d not handled", lt)
	}
	out := append(make([]byte, 0, len(data)), data[:24]...)
	dropped := 0
	for off := 24; off < len(data); {
		if len(data)-off < 16 {
			break // tcpdump stopped mid-record: the reader ends there too
		}
		hdr := data[off : off+16]
		incl := bo.Uint32(hdr[8:])
		if uint64(incl) > uint64(len(data)-off-16) {
			break
		}
		rec := data[off+16 : off+16+int(incl)]
		off += 16 + int(incl)
		keep := true
		if len(rec) >= lh.ip+40 && binary.BigEndian.Uint16(rec[lh.etherType:]) == 0x86dd {
			frac := int64(bo.Uint32(hdr[4:]))
			if !nano {
				frac *= 1000
			}
			pr := pcap.Record{Time: time.Unix(int64(bo.Uint32(hdr[0:])), frac), OrigLen: int(bo.Uint32(hdr[12:])), Data: rec}
			if pkt, ok := pcap.Decode(lt, pr); ok {
				keep = fn(&rawPacket{pkt: pkt, rec: rec, ip: lh.ip, lt: lt})
			}
		}
		if !keep {
			dropped++
			continue
		}
		out = append(out, hdr...)
		out = append(out, rec...)
	}
	return out, dropped, nil
}

// peerTimeline writes the MN's handoff as the measurement reads it (measure.Compute takes
// the first LU after entering L3 and its ACK): from, to are wall-clock instants of the
// mode's own packets (capture stamps), converted to CLOCK_MONOTONIC.
func peerTimeline(path string, from, to time.Time, fromWhat, toWhat string) error {
	off := timeline.Now() - time.Now().UnixNano() // mono - wall, now; drift over a run is negligible
	var b strings.Builder
	w := timeline.NewWriter(&b)
	w.Emit(timeline.Event{MonoNS: from.UnixNano() + off, Kind: timeline.LUSent, Node: "mn", Detail: fromWhat})
	if !to.IsZero() {
		w.Emit(timeline.Event{MonoNS: to.UnixNano() + off, Kind: timeline.LUAckReceived, Node: "mn", Detail: toWhat})
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// in64 says whether a is in the /64 of p.
func in64(a [16]byte, p [16]byte) bool { return string(a[:8]) == string(p[:8]) }

// nsSysctl reads a sysctl as a namespace's processes see it (/proc/sys/net differs per
// network namespace).
func nsSysctl(ns *netns.NS, key string) (string, error) {
	out, err := ns.Run("sysctl", "-n", key)
	return strings.TrimSpace(out), err
}

// peerPaths are a repetition's files a peer mode reads and writes.
func peerPaths(dir string) (mn, cn, mnOrig, cnOrig string) {
	return filepath.Join(dir, "mn.pcap"), filepath.Join(dir, "cn.pcap"), filepath.Join(dir, "mn-wire.pcap"), filepath.Join(dir, "cn-wire.pcap")
}

// MultihomeModes are the modes `--multihome` runs: ILNP soft handoff (issue 16) and the peers,
// whose answer to a silent path is their own (MPTCP's backup subflow; WireGuard has none).
var MultihomeModes = map[string]bool{"ilnp-soft": true, "mptcp": true, "wireguard": true}

// multihomer is a mode that configures the MN once both its access links are up in a
// multihomed run (multihomeAfter).
type multihomer interface {
	MultihomeUp(ctx context.Context, t *Topology) error
}

func multihomeUp(ctx context.Context, m Mode, t *Topology) error {
	if h, ok := m.(multihomer); ok {
		return h.MultihomeUp(ctx, t)
	}
	return nil
}

// failoverSource is a mode whose failover is read off other packets than the MN's measured
// capture (FailoverMs): the mode's own data packets on the wire.
type failoverSource interface {
	FailoverPackets(dir string, mn []pcap.Packet) ([]pcap.Packet, error)
}

func failoverPackets(m Mode, dir string, mn []pcap.Packet) ([]pcap.Packet, error) {
	if f, ok := m.(failoverSource); ok {
		return f.FailoverPackets(dir, mn)
	}
	return mn, nil
}

// Uplink routing tables of a multihomed MN in the peer modes.
const (
	uplinkTableR2 = 102
	uplinkTableR3 = 103
)

// UplinkPreferenceNote says how a multihomed MN routes in the peer modes (peer.json).
const UplinkPreferenceNote = "multihomed MN: source routing per uplink (from L2 via R2, from L3 via R3) and R2 the preferred default (metric 100 below the RA routes), as a user with a preferred and a spare uplink sets it"

// preferUplinkR2 is what a user of a peer with two uplinks sets up: each access address
// leaves through its own link (policy rules and a table per uplink, with the router the RA
// named), and the R2 uplink is the preferred default route, so that a flow starts on L2, the
// path `--fail r2-silent` fails. Nothing here reacts to the failure: R2 itself stays
// reachable.
func preferUplinkR2(ctx context.Context, t *Topology) error {
	for _, u := range []struct {
		ifname string
		prefix string
		table  int
	}{{IfMNR2, L2.String(), uplinkTableR2}, {IfMNR3, L3.String(), uplinkTableR3}} {
		gw, err := raRouter(ctx, t, u.ifname)
		if err != nil {
			return err
		}
		tbl := fmt.Sprint(u.table)
		for _, args := range [][]string{
			{"ip", "-6", "route", "replace", "default", "via", gw, "dev", u.ifname, "table", tbl},
			{"ip", "-6", "rule", "add", "from", u.prefix, "table", tbl, "priority", tbl},
		} {
			if out, err := t.MN.Run(args...); err != nil {
				return fmt.Errorf("multihomed MN: %s: %w: %s", strings.Join(args, " "), err, out)
			}
		}
		if u.ifname == IfMNR2 {
			args := []string{"ip", "-6", "route", "replace", "default", "via", gw, "dev", u.ifname, "metric", "100"}
			if out, err := t.MN.Run(args...); err != nil {
				return fmt.Errorf("multihomed MN: %s: %w: %s", strings.Join(args, " "), err, out)
			}
		}
	}
	return nil
}

// raRouter is the router an RA on the MN's interface installed as default (its link-local).
func raRouter(ctx context.Context, t *Topology, ifname string) (string, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := t.MN.Run("ip", "-6", "route", "show", "default", "dev", ifname)
		f := strings.Fields(out)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "via" {
				return f[i+1], nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("multihomed MN: no default route via %s from an RA: %q", ifname, out)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return "", err
		}
	}
}
