#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// Where the archive layer reads a package from: random access by offset, of a known size.
/// ``/SignetCore/InputFile`` (a package on disk) is one; a package read over HTTP range requests
/// (``/SignetNetwork/RangedInput``) is another, so that ``CentralDirectory``, ``WindowSource`` and ``ZipReader`` read a
/// remote package exactly as a local one, with the same checks.
package protocol ArchiveInput: AnyObject {
    /// The package's name in messages (a path or a URL).
    var path: String { get }
    /// Its size in bytes.
    var size: Int64 { get }
    /// Reads from `offset` until `buffer` is full or the input ends; returns the count read.
    /// Failures are thrown as ``/SignetCore/SignetError``.
    func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int
    /// Told the central directory once it is read and checked: where the entries are (a
    /// remote input keeps the directory's bytes and never reads below the entries it is asked
    /// for).
    func directoryRead(_ directory: CentralDirectory.Directory) throws
}

extension ArchiveInput {
    package func directoryRead(_ directory: CentralDirectory.Directory) {}
}

extension InputFile: ArchiveInput {}

/// Another input under another name in messages (a downloaded copy named by its URL).
package final class RenamedInput: ArchiveInput {
    private let input: any ArchiveInput
    package let path: String
    package var size: Int64 { input.size }

    package init(_ input: any ArchiveInput, path: String) {
        self.input = input
        self.path = path
    }

    package func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        try input.read(fullyAt: offset, into: buffer)
    }
}

/// An input read through one block buffer: a read smaller than a quarter of the block is
/// served from the block, which is refilled from the read's offset when it does not hold the
/// bytes; larger reads go straight to the input. libzip reads each entry's 30-byte local header,
/// its name and its data in separate small reads (and reads the headers once more for its
/// consistency check when a window opens): for a package of small files this turns about
/// sixteen `pread`s per entry into a few per block. One buffer, whatever the
/// package's size; not for sharing between threads (each ``WindowSource`` has its own).
///
/// Only over inputs where reading ahead costs nothing but the bytes (a file on disk): over
/// HTTP range requests a read ahead could ask for bytes the update never planned to fetch.
final class ReadAheadInput: ArchiveInput {
    static let blockSize = 128 * 1024

    private let input: any ArchiveInput
    var path: String { input.path }
    let size: Int64
    private let block: UnsafeMutableRawBufferPointer
    private var blockStart: Int64 = 0
    private var blockCount = 0

    /// `input` itself where reading ahead is not free, else a buffered view of it.
    static func over(_ input: any ArchiveInput) -> any ArchiveInput {
        input is InputFile ? ReadAheadInput(input) : input
    }

    private init(_ input: any ArchiveInput) {
        self.input = input
        size = input.size
        // Mapped, not malloc'd: a 128 KiB allocation freed and made again for every window
        // opened moves glibc's dynamic mmap threshold and then grows the heap by fragments
        // (peak RSS +8 MiB at 50,000 files, measured).
        let mapped = mmap(nil, Self.blockSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if let mapped, mapped != MAP_FAILED {
            block = UnsafeMutableRawBufferPointer(start: mapped, count: Self.blockSize)
            mappedBlock = true
        } else {
            block = .allocate(byteCount: Self.blockSize, alignment: 16)
            mappedBlock = false
        }
    }

    private let mappedBlock: Bool

    deinit {
        if mappedBlock { munmap(block.baseAddress, Self.blockSize) } else { block.deallocate() }
    }

    func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard buffer.count > 0 else { return 0 }
        guard buffer.count <= Self.blockSize / 4, offset >= 0 else { return try input.read(fullyAt: offset, into: buffer) }
        let end = offset.addingReportingOverflow(Int64(buffer.count))
        if end.overflow || offset < blockStart || end.partialValue > blockStart + Int64(blockCount) {
            // Refill from `offset` (a short block only at the end of the input).
            let wanted = Int(min(Int64(Self.blockSize), max(0, size - offset)))
            blockStart = offset
            blockCount = 0
            guard wanted > 0 else { return 0 }
            blockCount = try input.read(fullyAt: offset, into: UnsafeMutableRawBufferPointer(rebasing: block[0..<wanted]))
        }
        let from = Int(offset - blockStart)
        let count = max(0, min(buffer.count, blockCount - from))
        if count > 0 { buffer.baseAddress!.copyMemory(from: block.baseAddress! + from, byteCount: count) }
        return count
    }

    func directoryRead(_ directory: CentralDirectory.Directory) throws {
        try input.directoryRead(directory)
    }
}
