"""Stage 6: what instructors and students read. Feedback pages, the class's reports, and the escaping that keeps
student text inert in both."""
