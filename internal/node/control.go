package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/control"
	"ilnp/internal/datapath"
	"ilnp/internal/encap"
	"ilnp/internal/ilcc"
	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// The node answers ilnpctl through control.Handler. Reads of the ILCC are safe from any
// goroutine; anything that changes state or reads the LU engine runs on the loop.
var _ control.Handler = (*Node)(nil)

// SessionRow is one line of `ilnpctl show sessions`.
type SessionRow struct {
	PeerNID       string `json:"peer_nid"`
	SessionLocal  string `json:"session_local"`
	SessionRemote string `json:"session_remote"`
	ActiveLocal   string `json:"active_local"`
	ActiveRemote  string `json:"active_remote"`
	// Family is what the session's packets travel as: ipv4 (ILNPv6 in UDP/IPv4) when the
	// active remote locator is IPv4, else ipv6.
	Family string `json:"family"`
	// Mode is ilnp, or ipv6-fallback once the peer answered our nonce option with a Parameter
	// Problem (it is not an ILNP node, RFC 6744 s.6): its packets go as plain IPv6.
	Mode string `json:"mode"`
	// Encap6 lists the locator pairs running ILNPv6 in UDP/IPv6 because their path drops the
	// nonce header ("local->remote" and who turned it on), empty when all run natively.
	Encap6         string  `json:"encap6"`
	RemoteLocators string  `json:"remote_locators"`
	LocalNonce     string  `json:"local_nonce"`
	RemoteNonce    string  `json:"remote_nonce"`
	TxPackets      uint64  `json:"tx_packets"`
	RxPackets      uint64  `json:"rx_packets"`
	IdleS          float64 `json:"idle_s"`
	SRTTMs         float64 `json:"lu_srtt_ms"`
}

func (n *Node) ShowLocators(ctx context.Context) (any, error) {
	views := n.cache.LocatorViews(time.Now())
	rows := make([]control.LocatorRow, 0, len(views))
	for _, l := range views {
		loc, err := wire.ParseL64(l.Locator)
		if err != nil {
			continue
		}
		rows = append(rows, control.LocatorRow{
			Iface:     n.ifaces[l.IfIndex],
			Locator:   l.Locator,
			Family:    encap.Family(loc),
			Address:   wire.ILV{Locator: loc, NID: n.nid}.Addr().String(),
			State:     l.State.String(),
			Router:    l.Router,
			ValidSecs: l.ValidLifetimeS,
		})
	}
	return rows, nil
}

// ShowSessions lists the sessions (SessionRow) as a control.Streamer: the rows are encoded from
// the ILCC a slice of sessions at a time and written out as they go, with the datapath's
// counters of that slice's sessions read by key, and the LU engine's figures kept by NID. A
// table of strings per session, a slice of rows, two copies of their JSON and the datapath's
// counters of every session by NID were what one `show sessions` of 100,000 sessions added
// to the daemon's memory (issue 28). Sessions that close while the listing is written are
// left out.
func (n *Node) ShowSessions(ctx context.Context) (any, error) {
	t := &sessionTable{n: n, now: time.Now(), srtt: map[wire.NID]float64{}, e6: map[wire.NID][]string{}}
	if err := n.do(ctx, func() error {
		n.engine.EachSRTT(func(nid wire.NID, ms float64) { t.srtt[nid] = ms })
		return nil
	}); err != nil {
		return nil, err
	}
	for _, p := range n.encap6Rows() {
		if l := encap6Label(p); l != "" {
			t.e6[p.Key.RemoteNID] = append(t.e6[p.Key.RemoteNID], fmt.Sprintf("%v->%v(%s)", p.Key.Local, p.Key.Remote, l))
		}
	}
	t.nids = n.cache.PeerNIDs()
	return t, nil
}

// dpSession is what show sessions takes of a datapath session.
type dpSession struct {
	tx, rx   uint64
	fallback bool
}

// sessionTable is one `show sessions` being written.
type sessionTable struct {
	n    *Node
	now  time.Time
	nids []wire.NID
	srtt map[wire.NID]float64
	e6   map[wire.NID][]string
}

// sessionKey is a session's key in the datapath's table.
type sessionKey struct{ local, remote wire.NID }

// dpChunk reads the datapath's counters of the sessions of nids (as the ILCC has them now)
// into dp: the keys under the ILCC's lock, the table outside it. A session the table does
// not hold (an embryo, or one gone since) has none.
func (t *sessionTable) dpChunk(nids []wire.NID, keys []sessionKey, dp map[wire.NID]dpSession) []sessionKey {
	keys = keys[:0]
	t.n.cache.EachSessionOf(nids, func(s ilcc.SessionInfo) {
		keys = append(keys, sessionKey{s.SessionLocal.NID, s.Peer})
	})
	clear(dp)
	for _, k := range keys {
		s, err := t.n.dp.GetSession(k.local, k.remote)
		if err != nil || s.Flags&datapath.SessionEmbryonic != 0 {
			continue
		}
		dp[k.remote] = dpSession{s.TxPackets, s.RxPackets, s.Flags&datapath.SessionIPv6Fallback != 0}
	}
	return keys
}

// sessionChunk is how many sessions the listing encodes per hold of the ILCC.
const sessionChunk = 1024

// StreamJSON writes the rows as one JSON array.
func (t *sessionTable) StreamJSON(w io.Writer) error {
	var (
		buf   bytes.Buffer
		err   error
		locs  []string
		first = true
		keys  []sessionKey
		dp    = make(map[wire.NID]dpSession, sessionChunk)
	)
	buf.WriteByte('[')
	for i := 0; i < len(t.nids) || i == 0; i += sessionChunk {
		chunk := t.nids[i:min(i+sessionChunk, len(t.nids))]
		keys = t.dpChunk(chunk, keys, dp)
		t.n.cache.EachSessionOf(chunk, func(s ilcc.SessionInfo) {
			if err != nil {
				return
			}
			locs = locs[:0]
			for _, r := range s.RemoteLocators {
				locs = append(locs, fmt.Sprintf("%s(%s)", r.Locator, r.State))
			}
			dp := dp[s.Peer]
			row := SessionRow{
				PeerNID:        s.Peer.String(),
				SessionLocal:   s.SessionLocal.Addr().String(),
				SessionRemote:  s.SessionRemote.Addr().String(),
				ActiveRemote:   s.ActiveRemote.String(),
				Family:         encap.Family(s.ActiveRemote),
				Mode:           "ilnp",
				Encap6:         strings.Join(slices.Sorted(slices.Values(t.e6[s.Peer])), ","),
				RemoteLocators: strings.Join(locs, ","),
				LocalNonce:     s.LocalNonce.String(),
				RemoteNonce:    s.RemoteNonce.String(),
				TxPackets:      dp.tx,
				RxPackets:      dp.rx,
				IdleS:          t.now.Sub(s.LastUsed).Seconds(),
				SRTTMs:         t.srtt[s.Peer],
			}
			if s.HasLocal {
				row.ActiveLocal = s.ActiveLocal.String()
			}
			if dp.fallback {
				row.Mode = "ipv6-fallback"
			}
			var b []byte
			if b, err = json.Marshal(row); err != nil {
				return
			}
			if !first {
				buf.WriteByte(',')
			}
			first = false
			buf.Write(b)
		})
		if err != nil {
			return fmt.Errorf("encode sessions: %w", err)
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
		buf.Reset()
	}
	_, err = w.Write([]byte{']'})
	return err
}

func (n *Node) ShowPeers(ctx context.Context) (any, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	rows := make([]control.PeerRow, 0, len(n.peers))
	for name, ilvs := range n.peers {
		row := control.PeerRow{Name: name, NID: ilvs[0].ILV.NID.String()}
		for _, v := range ilvs {
			row.ILVs = append(row.ILVs, fmt.Sprintf("%s|%d", v.ILV.Addr(), v.Preference))
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

// ShowStats merges the datapath's counters (prefixed "dp_") with the daemon's own and the LU
// engine's.
func (n *Node) ShowStats(ctx context.Context) (any, error) {
	stats := map[string]uint64{}
	counters, err := n.dp.Counters()
	if err != nil {
		return nil, fmt.Errorf("datapath counters: %w", err)
	}
	for name, v := range counters {
		stats["dp_"+name] = v
	}
	n.mu.Lock()
	for name, v := range n.counters {
		stats[name] = v
	}
	n.mu.Unlock()
	n.addPublisherStats(stats) // dns_* (rendezvous.go)
	stats["goroutines"] = uint64(runtime.NumGoroutine())
	// The ILCC's session count: `show sessions` lists them all, too much to ask at 100,000.
	stats["ilcc_sessions"] = uint64(n.cache.Len())
	n.addTCPAwareStats(stats)                      // tcpaware_* (tcpaware.go)
	if err := n.addEncapStats(stats); err != nil { // dp_encap_* (xfamily.go)
		return nil, err
	}
	return stats, nil
}

func (n *Node) Events(ctx context.Context, follow bool) ([]timeline.Event, <-chan timeline.Event, func(), error) {
	past := n.history.all()
	if !follow {
		return past, nil, nil, nil
	}
	live, stop := n.timeline.Subscribe(256)
	return past, live, stop, nil
}

func (n *Node) SetHandoff(ctx context.Context, mode config.Handoff) error {
	m, err := ilcc.ParseMode(string(mode))
	if err != nil {
		return err
	}
	return n.do(ctx, func() error {
		now := time.Now()
		eff, err := n.cache.SetMode(m, now)
		if err != nil {
			return err
		}
		// The ILCC reports the change itself ("soft -> hard"), and nothing when the mode was
		// already m: one event per change.
		n.apply(eff, now)
		return nil
	})
}

func (n *Node) AddPeer(ctx context.Context, name string, ilvs []wire.RankedILV) error {
	return n.RegisterPeer(ctx, name, ilvs)
}
