# Turns a text file into a C++ source defining `extern const char *const NAME`, so the
# compiler can ship the CPU kernel library inside every artifact it writes.
file(READ ${IN} content)
file(WRITE ${OUT} "// Generated from ${IN}; do not edit.\nextern const char *const ${NAME};\nconst char *const ${NAME} = R\"ORTC_EMBED(${content})ORTC_EMBED\";\n")
