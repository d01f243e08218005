"""``specdecode demo``: the whole loop on a laptop - API emulator, operator, simulated runtime pods, tuner.

Everything the demo measures comes from the simulator and is labelled simulated.
"""
