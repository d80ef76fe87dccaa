// libparallax.so is px_trainer linked whole (see CMakeLists.txt); a shared
// library target needs at least one source of its own.
