// The least per-packet work ILNP needs on a TCP flow (one lookup, nonce in/out,
// checksum fix, header store), to bound what a nonce added at tc costs at least
// (scripts/tput-floor/run.sh; README, issue 28). Not the datapath: an experiment.
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
char LICENSE[] SEC("license") = "GPL";
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 1024); __type(key, __u64); __type(value, __u64); } m SEC(".maps");
struct hdr { __u8 ip6[40]; __u8 opt[8]; };
SEC("tc") int eg(struct __sk_buff *skb)
{
	void *d = (void *)(long)skb->data, *e = (void *)(long)skb->data_end;
	struct hdr h;
	__u64 k = 1, *v;
	if (d + 54 > e || *(__be16 *)(d + 12) != bpf_htons(0x86dd) || *(__u8 *)(d + 20) != 6)
		return TC_ACT_OK;
	__builtin_memcpy(h.ip6, d + 14, 40);
	v = bpf_map_lookup_elem(&m, &k);
	if (!v) return TC_ACT_OK;
	if (bpf_skb_adjust_room(skb, 8, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0) return TC_ACT_SHOT;
	if (bpf_l4_csum_replace(skb, 14 + 48 + 16, 0, 0, BPF_F_PSEUDO_HDR) < 0) return TC_ACT_SHOT;
	h.opt[0] = 6; h.opt[1] = 0; h.opt[2] = 0x8b; h.opt[3] = 4;
	__builtin_memcpy(&h.opt[4], v, 4);
	h.ip6[6] = 60;
	*(__be16 *)&h.ip6[4] = bpf_htons(bpf_ntohs(*(__be16 *)&h.ip6[4]) + 8);
	return bpf_skb_store_bytes(skb, 14, &h, 48, BPF_F_RECOMPUTE_CSUM) < 0 ? TC_ACT_SHOT : TC_ACT_OK;
}
SEC("tc") int in(struct __sk_buff *skb)
{
	void *d = (void *)(long)skb->data, *e = (void *)(long)skb->data_end;
	__u8 ip6[40];
	__u64 k;
	if (d + 62 > e || *(__be16 *)(d + 12) != bpf_htons(0x86dd) || *(__u8 *)(d + 20) != 60 || *(__u8 *)(d + 56) != 0x8b)
		return TC_ACT_OK;
	__builtin_memcpy(ip6, d + 14, 40);
	k = 1;
	if (!bpf_map_lookup_elem(&m, &k)) return TC_ACT_SHOT;
	ip6[6] = *(__u8 *)(d + 54);
	*(__be16 *)&ip6[4] = bpf_htons(bpf_ntohs(*(__be16 *)&ip6[4]) - 8);
	if (bpf_l4_csum_replace(skb, 14 + 48 + 16, 0, 0, BPF_F_PSEUDO_HDR) < 0) return TC_ACT_SHOT;
	if (bpf_skb_adjust_room(skb, -8, BPF_ADJ_ROOM_NET, BPF_F_ADJ_ROOM_FIXED_GSO) < 0) return TC_ACT_SHOT;
	return bpf_skb_store_bytes(skb, 14, ip6, 40, BPF_F_RECOMPUTE_CSUM) < 0 ? TC_ACT_SHOT : TC_ACT_OK;
}
