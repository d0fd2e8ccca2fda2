# Turns a text file into a C++ source defining `extern const char *const NAME`, so the
# compiler can ship the kernel libraries inside every artifact it writes. With INLINE (a
# folder), each `#include "H"` of a header H in that folder is replaced by H's text, so
# the embedded library stands alone (kernels/common/ortc_scalar.h in both libraries):
# an artifact ships one header per library, and its compile needs no other folder.
file(READ ${IN} content)
if(DEFINED INLINE)
  file(GLOB headers RELATIVE ${INLINE} ${INLINE}/*.h)
  foreach(h IN LISTS headers)
    file(READ ${INLINE}/${h} text)
    string(REPLACE "#include \"${h}\"" "${text}" content "${content}")
  endforeach()
  # An include left over (another spelling, a header elsewhere) would ship a library
  # that does not compile in the artifact: stop here instead.
  string(REGEX MATCH "#[ \t]*include[ \t]*\"[^\"]*\"" left "${content}")
  if(left)
    message(FATAL_ERROR "${IN}: '${left}' is not a header of ${INLINE}; the embedded library must stand alone")
  endif()
endif()
file(WRITE ${OUT} "// Generated from ${IN}; do not edit.\nextern const char *const ${NAME};\nconst char *const ${NAME} = R\"ORTC_EMBED(${content})ORTC_EMBED\";\n")
