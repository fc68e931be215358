"""gpuperf.checks"""
