/* Whether an ECN-capable packet is marked CE, from the egress queue depth it found (packets).
 *
 * RED as the native engine does it: never below kmin, always at kmax or more, and in between with
 * probability pmax x (depth - kmin) / (kmax - kmin) = (depth - kmin) x step / 65536, where the
 * control plane computes step = pmax x 65536 / (kmax - kmin) (no division in the data plane).
 * Kept in its own file (included by fabric.p4 through -I) so the p4-ecn lab can replace it.
 */
control EcnDecide(in bit<32> depth, in bit<32> kmin, in bit<32> kmax, in bit<32> step, inout bit<1> mark) {
    apply {
        if (depth >= kmax) {
            mark = 1;
        } else if (depth > kmin) {
            bit<32> r;
            random(r, 32w0, 32w65535);  // v1model's per-packet random number, uniform in [0, 65535]
            if (r < (depth - kmin) * step) { mark = 1; }
        }
    }
}
