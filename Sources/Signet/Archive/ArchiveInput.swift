/// Where the archive layer reads a package from: random access by offset, of a known size.
/// ``InputFile`` (a package on disk) is one; a package read over HTTP range requests
/// (``RangedInput``) is another, so that ``CentralDirectory``, ``WindowSource`` and ``ZipReader`` read a
/// remote package exactly as a local one, with the same checks.
protocol ArchiveInput: AnyObject {
    /// The package's name in messages (a path or a URL).
    var path: String { get }
    /// Its size in bytes.
    var size: Int64 { get }
    /// Reads from `offset` until `buffer` is full or the input ends; returns the count read.
    /// Failures are thrown as ``SignetError``.
    func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int
    /// Told the central directory once it is read and checked: where the entries are (a
    /// remote input keeps the directory's bytes and never reads below the entries it is asked
    /// for).
    func directoryRead(_ directory: CentralDirectory.Directory) throws
}

extension ArchiveInput {
    func directoryRead(_ directory: CentralDirectory.Directory) {}
}

extension InputFile: ArchiveInput {}

/// Another input under another name in messages (a downloaded copy named by its URL).
final class RenamedInput: ArchiveInput {
    private let input: any ArchiveInput
    let path: String
    var size: Int64 { input.size }

    init(_ input: any ArchiveInput, path: String) {
        self.input = input
        self.path = path
    }

    func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        try input.read(fullyAt: offset, into: buffer)
    }
}
