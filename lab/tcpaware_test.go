package lab

import "testing"

func TestNstatValue(t *testing.T) {
	out := "#kernel\nTcpExtTCPTimeouts               7                  0.0\nTcpExtTCPTimeoutsX 9 0.0\nBad -1 0\n"
	for _, tc := range []struct {
		name string
		want int
		ok   bool
	}{{"TcpExtTCPTimeouts", 7, true}, {"TcpExtTCPTimeoutsX", 9, true}, {"Missing", 0, false}, {"Bad", -1, false}} {
		v, ok := NstatValue(out, tc.name)
		if ok != tc.ok || (ok && v != tc.want) {
			t.Errorf("NstatValue(%s) = %d, %v; want %d, %v", tc.name, v, ok, tc.want, tc.ok)
		}
	}
}

func FuzzNstatValue(f *testing.F) {
	f.Add("TcpExtTCPTimeouts 3 0.0\n", "TcpExtTCPTimeouts")
	f.Add("#kernel\nA 99999999999999999999 0\n", "A")
	f.Fuzz(func(t *testing.T, out, name string) {
		if v, ok := NstatValue(out, name); ok && v < 0 {
			t.Fatalf("negative counter %d accepted", v)
		}
	})
}
