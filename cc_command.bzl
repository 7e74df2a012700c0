"""The C++ toolchain's own compile command line, for rules that compile
outside cc_library: the precompiled headers (//:pch.bzl) and the header
check (//tools:include_check.bzl). A file compiled with it sees what a
translation unit of a cc_library sees: the configuration's --copt and
--cxxopt, the toolchain's features, the include paths and defines of `cctx`
(a CcCompilationContext), then `copts`.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "CPP_COMPILE_ACTION_NAME")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def cc_compile_command(ctx, cctx, copts, source, output = None):
    """The command that compiles `source` (a File) with `cctx` and `copts`.

    Needs the rule's `_cc_toolchain` attribute, the cpp fragment and the C++
    toolchain type (see pch.bzl's rule for the declarations).

    Returns:
      A struct: `compiler` (a path), `arguments` (the list after it), `env`
      (a dict) and `toolchain_files` (a depset of the toolchain's inputs).
    """
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    variables = cc_common.create_compile_variables(
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts + copts,
        source_file = source.path,
        output_file = output.path if output else None,
        include_directories = cctx.includes,
        quote_include_directories = depset(
            [".", ctx.bin_dir.path, ctx.genfiles_dir.path],
            transitive = [cctx.quote_includes],
        ),
        system_include_directories = cctx.system_includes,
        preprocessor_defines = cctx.defines,
        use_pic = True,
    )
    return struct(
        compiler = cc_common.get_tool_for_action(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
        ),
        arguments = cc_common.get_memory_inefficient_command_line(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
            variables = variables,
        ),
        env = cc_common.get_environment_variables(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
            variables = variables,
        ),
        toolchain_files = cc_toolchain.all_files,
    )
