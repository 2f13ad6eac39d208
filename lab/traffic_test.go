package lab

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// tcp-r is the tcp flow with the MN sending: the same iperf3 client on the CN, plus -R.
func TestTrafficReverseArgs(t *testing.T) {
	fwd := Traffics["tcp"].ClientArgs("mn", 12*time.Second, "l")
	rev := Traffics["tcp-r"].ClientArgs("mn", 12*time.Second, "l")
	if slices.Contains(fwd, "-R") || !slices.Equal(append(slices.Clone(fwd), "-R"), rev) {
		t.Errorf("tcp: %s\ntcp-r: %s\nwant tcp-r = tcp + -R", strings.Join(fwd, " "), strings.Join(rev, " "))
	}
	if !Traffics["tcp-r"].Reverse || Traffics["tcp"].Reverse || Traffics["tcp-r"].UDP {
		t.Errorf("tcp-r %+v", Traffics["tcp-r"])
	}
}
