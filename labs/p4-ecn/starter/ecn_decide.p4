/* Lab p4-ecn: decide whether an ECN-capable packet is marked CE (see README.md).
 *
 * fabric.p4's egress calls this control for every ECN-capable packet, with the depth of the
 * egress queue it found (packets) and the port's RED parameters from the ecn_red table:
 *   kmin, kmax  thresholds in packets
 *   step        the slope: the marking probability between kmin and kmax is
 *               (depth - kmin) x step / 65536
 * Set `mark` to 1 to mark the packet; fabric.p4 then writes CE into its IP header and counts it.
 */
control EcnDecide(in bit<32> depth, in bit<32> kmin, in bit<32> kmax, in bit<32> step, inout bit<1> mark) {
    apply {
        // TODO 1: at kmax or more packets queued, always mark.
        // TODO 2: between kmin and kmax, mark with probability (depth - kmin) x step / 65536:
        //         draw a number with v1model's extern `random(out r, lo, hi)` (bit<32> r, 0..65535)
        //         and mark when it is below (depth - kmin) x step.
        // Below kmin, never mark.
    }
}
