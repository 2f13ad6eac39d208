package node_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"ilnp/internal/paths"
)

// A session with one pair between two single-homed nodes is not tracked by path liveness
// (paths.PeerInput.Lone: its verdicts could move nothing), and `ilnpctl show paths` still lists
// its pair at both ends from the datapath's counters: alive while it delivers, its bytes, the
// MN's UDP socket on it, no RTT or loss (it is not probed).
func TestLonePathShown(t *testing.T) {
	n := newTestNet(t, "soft")
	cnAddr, err := resolve(n.MN, "cn")
	if err != nil || cnAddr != ilv(l1, cnNID) {
		t.Fatalf("resolve cn on the MN: %v %v", cnAddr, err)
	}
	srv := n.CN.ListenPacket("udp", fmt.Sprintf("[%s]:5202", cnAddr))
	defer srv.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteTo(buf[:k], from)
		}
	}()
	var udp *net.UDPConn
	if err := n.MN.Do(func() error {
		c, err := net.Dial("udp", fmt.Sprintf("[%s]:5202", cnAddr))
		if err == nil {
			udp = c.(*net.UDPConn)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var flow udpProbeFlow
	go flow.run(ctx, udp)

	pairOf := func(d *daemon, peer string) (paths.View, int, error) {
		var rows []paths.View
		if err := d.showJSON("paths", &rows); err != nil {
			return paths.View{}, 0, err
		}
		var v paths.View
		k := 0
		for _, r := range rows {
			if r.Peer == peer {
				v, k = r, k+1
			}
		}
		return v, k, nil
	}
	n.waitFor(10*time.Second, "both ends list the one pair alive", func() (bool, string) {
		mv, mk, merr := pairOf(n.mn, cnNID.String())
		cv, ck, cerr := pairOf(n.cn, mnNID.String())
		return merr == nil && cerr == nil && flow.count() > 50 && mk == 1 && ck == 1 && mv.State == paths.Alive && cv.State == paths.Alive,
			fmt.Sprintf("MN %+v (%d, %v), CN %+v (%d, %v), echoes %d", mv, mk, merr, cv, ck, cerr, flow.count())
	})
	time.Sleep(1100 * time.Millisecond) // sockets are counted when asked, the pair's proof is fresh
	mv, _, err := pairOf(n.mn, cnNID.String())
	if err != nil {
		t.Fatal(err)
	}
	if mv.Local != l2.String() || mv.Remote != l1.String() || mv.TxPackets == 0 || mv.RxPackets == 0 || mv.TxBytes == 0 || mv.RxBytes == 0 ||
		mv.LastProofMsAgo == nil || *mv.LastProofMsAgo > 500 || mv.Flows != 1 || mv.RTTMs != nil || mv.Loss != nil {
		t.Errorf("MN's pair to the CN: %+v", mv)
	}
	cv, _, err := pairOf(n.cn, mnNID.String())
	if err != nil {
		t.Fatal(err)
	}
	if cv.Local != l1.String() || cv.Remote != l2.String() || cv.RxPackets == 0 || cv.TxPackets == 0 || cv.RTTMs != nil {
		t.Errorf("CN's pair to the MN: %+v", cv)
	}
}
