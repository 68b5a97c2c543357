"""Reporting: tables for the terminal and files."""
