"""Stages 1 and 2: a class's submissions (a folder or a zip) found by their exact paths, and each file checked
against its released notebook before anything runs."""
