"""gpuperf.topology"""
