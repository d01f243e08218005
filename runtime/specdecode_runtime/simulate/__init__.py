"""The simulated runtime: the patched runtime's HTTP and metrics contract on a simulated clock (all numbers it
produces are simulated, and labelled so)."""
