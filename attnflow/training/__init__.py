"""training"""
