// Stragglers: nodes run the same work at slightly different speeds from step to step, and
// a synchronous step goes at the pace of the slowest. Inside a data-parallel replica the
// tensor- and pipeline-parallel exchanges keep its GPUs in step every layer, so what a
// replica's nodes lose is already its own time; between replicas nothing waits until the
// gradient sync, where every replica waits for the slowest node of the data-parallel group.
// With each node's step time normal around the mean with spread σ (standard deviation over
// mean), that wait is σ · E[max of n standard normals] of the step so far, n the nodes the
// group spans (replicas on one node share its host and power: one draw).
#pragma once

namespace tandem::sim {

// E[max(Z1, …, Zn)] of n independent standard normals: 0 for n ≤ 1, 1/√π for 2,
// about 1.42 for 8, 2.07 for 32, 2.75 for 192.
double expected_max_of_normals(int n);

// The fraction of the step so far that a gradient sync over `nodes` nodes waits for the
// slowest: spread · E[max of nodes standard normals].
double straggler_wait_fraction(double spread, int nodes);

}  // namespace tandem::sim
