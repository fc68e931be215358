"""gpuperf.samplers"""
