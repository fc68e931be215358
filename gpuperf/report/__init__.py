"""gpuperf.report"""
