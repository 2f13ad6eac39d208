package datapath

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"ilnp/internal/nstest"
)

// BenchmarkNetnsThroughput prints what one unpaced iperf3 TCP flow between the CN and the MN's
// home address (both directions) reaches at home, through the HA's tunnel and route-optimised, with the hosts' TSO
// off (the recommended lab setting) and on, and on without route MTUs (Packet Too Big brings
// the path MTU down). Figures, not goals: the machine is shared.
func BenchmarkNetnsThroughput(b *testing.B) {
	nstest.RequireTool(b, "iperf3", "ethtool", "tcpdump", "tshark")
	for _, cfg := range []struct {
		name string
		o    topoOptions
	}{{"tso-off", topoOptions{tsoOff: true}}, {"tso-on", topoOptions{}}, {"tso-on-no-route-mtu", topoOptions{noRouteMTU: true}}} {
		tp := newMIPTopo(b, cfg.o)
		name := cfg.name
		for _, mode := range []string{"home", "tunnel", "ro"} {
			switch mode {
			case "tunnel":
				tp.moveToForeignLink(b)
			case "ro":
				must(b, tp.corr.SetBinding(hoa, coa))
				must(b, tp.mn6.SetRO(cn, true))
			}
			for _, reverse := range []bool{false, true} {
				dir := "cn-to-mn"
				if reverse {
					dir = "mn-to-cn"
				}
				b.Run(name+"/"+mode+"/"+dir, func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						bps, retr := iperf(b, tp, 3*time.Second, reverse)
						b.ReportMetric(bps/1e6, "Mbit/s")
						b.ReportMetric(float64(retr), "retransmits")
					}
				})
			}
		}
		for node, d := range map[string]*Datapath{"HA": tp.ha, "MN": tp.mn6, "CN": tp.corr} {
			c, err := d.Counters()
			must(b, err)
			var nz []string
			for _, k := range counterNames {
				if c[k] != 0 && k != "packets" {
					nz = append(nz, fmt.Sprintf("%s=%d", k, c[k]))
				}
			}
			b.Logf("%s %s counters: %s", cfg.name, node, strings.Join(nz, " "))
		}
	}
}

// iperf runs one iperf3 TCP test from the CN to the HoA (reverse: the MN sends).
func iperf(b *testing.B, tp *mipTopo, d time.Duration, reverse bool) (bps float64, retransmits int) {
	b.Helper()
	srv := tp.mn.Start(nil, "iperf3", "-s", "-1", "-B", hoa.String(), "-p", "5201")
	defer func() { _ = srv.Process.Kill() }()
	for i := 0; ; i++ {
		if out, _ := tp.mn.Try("ss", "-Hltn", "sport", "= :5201"); strings.Contains(out, "5201") {
			break
		}
		if i == 100 {
			b.Fatal("iperf3 server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	args := []string{"iperf3", "-c", hoa.String(), "-p", "5201", "-J", "-C", "cubic", "-t", fmt.Sprint(int(d.Seconds()))}
	if reverse {
		args = append(args, "-R")
	}
	out, err := tp.cn.Try(args...)
	if err != nil && !strings.HasPrefix(strings.TrimSpace(out), "{") {
		b.Fatalf("iperf3: %v\n%s", err, out)
	}
	var r struct {
		Error string `json:"error"`
		End   struct {
			SumSent struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Retransmits   int     `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		b.Fatalf("iperf3 JSON: %v\n%s", err, out)
	}
	if r.Error != "" {
		b.Fatalf("iperf3: %s", r.Error)
	}
	return r.End.SumReceived.BitsPerSecond, r.End.SumSent.Retransmits
}
