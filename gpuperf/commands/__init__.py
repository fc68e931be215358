"""gpuperf.commands"""
