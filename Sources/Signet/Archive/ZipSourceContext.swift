internal import CZip

/// The object behind a libzip source callback's context pointer (retained for libzip, released
/// on `ZIP_SOURCE_FREE`), holding the error libzip asks the source for.
protocol ZipSourceContext: AnyObject {
    var zipError: zip_error_t { get set }
}

/// The commands every Signet source answers alike: the last error, freeing the context, the
/// supported commands (`supported`, a bitmap of ``zipSourceCommands(_:)``), and any other
/// command as not supported.
func answerCommonZipSourceCommand<Context: ZipSourceContext>(_ command: zip_source_cmd_t, of _: Context.Type, context: UnsafeMutableRawPointer,
                                                             data: UnsafeMutableRawPointer?, length: zip_uint64_t, supported: Int64) -> Int64 {
    let object = Unmanaged<Context>.fromOpaque(context).takeUnretainedValue()
    switch command {
    case ZIP_SOURCE_ERROR:
        return zip_error_to_data(&object.zipError, data, length)
    case ZIP_SOURCE_FREE:
        Unmanaged<Context>.fromOpaque(context).release()
        return 0
    case ZIP_SOURCE_SUPPORTS:
        return supported
    default:
        zip_error_set(&object.zipError, ZIP_ER_OPNOTSUPP, 0)
        return -1
    }
}

/// The bitmap libzip's `ZIP_SOURCE_SUPPORTS` answers with (`zip_source_make_command_bitmap`,
/// which is variadic and so not callable from Swift).
func zipSourceCommands(_ commands: [zip_source_cmd_t]) -> Int64 {
    commands.reduce(Int64(0)) { $0 | (Int64(1) << Int64($1.rawValue)) }
}
