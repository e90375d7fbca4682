"""Stage 3: execution in the sandbox. The kernel's launcher (bubblewrap, allowlists, limits), its control
group, and nbgrader's Execute with caps on what the kernel sends."""
