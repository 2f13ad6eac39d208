package nstest

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// EchoProbe sends a numbered datagram (an 8-byte big-endian sequence number from 1) to an
// echo server every interval and counts the echoes that come back, once each: how many were
// lost, the longest silence between two echoes and when it ended.
type EchoProbe struct {
	conn   net.PacketConn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sent   atomic.Int64
	got    atomic.Int64
	next   atomic.Uint64 // the sequence number the next datagram will carry

	mu     sync.Mutex
	seen   map[uint64]bool
	unsent map[uint64]bool // writes that failed: not lost, never sent
	lastRx time.Time
	maxGap time.Duration
	gapEnd time.Time
}

// EchoResult is what an EchoProbe saw.
type EchoResult struct {
	Sent, Got int64
	// Missing are the sequence numbers whose echo never came back, in order.
	Missing []uint64
	// MaxGap is the longest time between two echoes; MaxGapEnd when it ended.
	MaxGap    time.Duration
	MaxGapEnd time.Time
	// LastRx is when the last echo arrived.
	LastRx time.Time
}

// StartEchoProbe sends from conn to dst every interval until Stop; conn is the probe's.
func StartEchoProbe(conn net.PacketConn, dst net.Addr, every time.Duration) *EchoProbe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &EchoProbe{conn: conn, cancel: cancel, seen: map[uint64]bool{}, unsent: map[uint64]bool{}}
	p.next.Store(1)
	p.wg.Add(2)
	go p.send(ctx, dst, every)
	go p.receive()
	return p
}

func (p *EchoProbe) send(ctx context.Context, dst net.Addr, every time.Duration) {
	defer p.wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	buf := make([]byte, 200)
	for seq := uint64(1); ctx.Err() == nil; seq++ {
		binary.BigEndian.PutUint64(buf, seq)
		p.next.Store(seq + 1)
		if _, err := p.conn.WriteTo(buf, dst); err == nil {
			p.sent.Add(1)
		} else {
			p.mu.Lock()
			p.unsent[seq] = true
			p.mu.Unlock()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

func (p *EchoProbe) receive() {
	defer p.wg.Done()
	buf := make([]byte, 2000)
	for {
		k, _, err := p.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if k < 8 {
			continue
		}
		now, seq := time.Now(), binary.BigEndian.Uint64(buf)
		p.mu.Lock()
		if !p.seen[seq] && seq > 0 && seq < p.next.Load() {
			p.seen[seq] = true
			p.got.Add(1)
			if !p.lastRx.IsZero() && now.Sub(p.lastRx) > p.maxGap {
				p.maxGap, p.gapEnd = now.Sub(p.lastRx), now
			}
			p.lastRx = now
		}
		p.mu.Unlock()
	}
}

// Got is the number of distinct echoes received so far.
func (p *EchoProbe) Got() int64 { return p.got.Load() }

// NextSeq is the sequence number the next datagram will carry: datagrams sent from now on
// have this number or a higher one.
func (p *EchoProbe) NextSeq() uint64 { return p.next.Load() }

// Snapshot is the result so far, without stopping.
func (p *EchoProbe) Snapshot() EchoResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := EchoResult{Sent: p.sent.Load(), Got: p.got.Load(), MaxGap: p.maxGap, MaxGapEnd: p.gapEnd, LastRx: p.lastRx}
	for seq := uint64(1); seq < p.next.Load(); seq++ {
		if !p.seen[seq] && !p.unsent[seq] {
			r.Missing = append(r.Missing, seq)
		}
	}
	return r
}

// Stop stops sending, gives the echoes in flight grace to come back, closes the connection
// and returns the result.
func (p *EchoProbe) Stop(grace time.Duration) EchoResult {
	p.cancel()
	time.Sleep(grace)
	_ = p.conn.Close()
	p.wg.Wait()
	r := p.Snapshot()
	r.Missing = slices.Clip(r.Missing)
	return r
}
