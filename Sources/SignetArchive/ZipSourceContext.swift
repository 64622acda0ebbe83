internal import CZip
import SignetCore

/// The object behind a libzip source callback's context pointer (retained for libzip, released
/// on `ZIP_SOURCE_FREE`), holding the error libzip asks the source for.
protocol ZipSourceContext: AnyObject {
    var zipError: zip_error_t { get set }
}

/// The commands every Signet source answers alike: the last error, freeing the context, the
/// supported commands (`supported`, a bitmap of ``zipSourceCommands(_:)``), and any other
/// command as not supported.
func answerCommonZipSourceCommand<Context: ZipSourceContext>(
    _ command: zip_source_cmd_t, of _: Context.Type, context: UnsafeMutableRawPointer,
    data: UnsafeMutableRawPointer?, length: zip_uint64_t, supported: Int64
) -> Int64 {
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

/// `zip_open_from_source`, after libzip's lazily filled statics are known to be set.
///
/// libzip 1.7 (Debian 12's) computes the command bitmaps `zip_open_from_source` requires into
/// two function-level statics on its first call, one after the other and without a lock. A
/// second thread that opens an archive at that moment can see the first set and the second still
/// -1, and then takes any writable source for read-only: `pack`'s deflate workers, which open
/// their temporary archives at once, failed with "Read-only archive" that way (once, in CI).
/// The first call is made here once, under the runtime's once-only initialisation, before any
/// real one.
func openZipArchive(_ source: OpaquePointer, _ flags: Int32, _ error: UnsafeMutablePointer<zip_error_t>) -> OpaquePointer? {
    _ = libzipStaticsPrepared
    return zip_open_from_source(source, flags, error)
}

/// Runs one `zip_open_from_source` that libzip refuses right after filling its statics
/// (read-only and truncate together), on an empty buffer source it never reads.
private let libzipStaticsPrepared: Bool = {
    var error = zip_error_t()
    zip_error_init(&error)
    defer { zip_error_fini(&error) }
    guard let source = zip_source_buffer_create(nil, 0, 0, &error) else { return false }
    defer { zip_source_free(source) }
    if let archive = zip_open_from_source(source, ZIP_RDONLY | ZIP_TRUNCATE, &error) {
        zip_source_keep(source)
        zip_discard(archive)
    }
    return true
}()
