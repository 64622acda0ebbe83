import Foundation
import Testing
@testable import SignetCore
import SignetTestSupport
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// The one owner of a descriptor (issue 30): closes exactly once, when its scope ends, and not
/// at all once handed on. Other tests run in parallel and reuse descriptor numbers, so "closed"
/// is checked as "the number no longer names this file" (by device and inode).
@Suite("OwnedDescriptor")
struct OwnedDescriptorTests {
    private func identity(_ raw: Int32) -> [UInt64]? {
        var info = stat()
        return fstat(raw, &info) == 0 ? [UInt64(info.st_dev), UInt64(info.st_ino)] : nil
    }

    @Test("closes at the end of its scope, after its last use; take() hands it on open; close() closes once")
    func ownership() throws {
        let directory = try TemporaryDirectory()
        let path = try directory.write("f", Data("x".utf8))
        let expected = try Paths.lstat(path).st_ino
        var raw: Int32 = -1
        do {
            let owned = try Paths.open(path, O_RDONLY | O_CLOEXEC)
            raw = owned.descriptor.rawValue
            #expect(identity(raw)?[1] == UInt64(expected))
            // Still open after the last mention of `owned` within the scope.
            #expect(identity(raw)?[1] == UInt64(expected))
        }
        #expect(identity(raw)?[1] != UInt64(expected), "the owner's scope ended: the descriptor is closed")

        let handed = try Paths.open(path, O_RDONLY | O_CLOEXEC).take()
        #expect(identity(handed.rawValue)?[1] == UInt64(expected), "take() leaves it open for its new owner")
        try handed.close()

        let explicit = try Paths.open(path, O_RDONLY | O_CLOEXEC)
        let number = explicit.descriptor.rawValue
        try explicit.close()
        #expect(identity(number)?[1] != UInt64(expected))
    }

    @Test("a class that stores one closes it with the class; a failed open leaves nothing open")
    func storedAndFailed() throws {
        let directory = try TemporaryDirectory()
        let path = try directory.write("f", Data("x".utf8))
        let expected = try Paths.lstat(path).st_ino
        var raw: Int32 = -1
        do {
            let file = try InputFile.open(path, what: "file")
            raw = file.descriptor.rawValue
            #expect(try file.readAll(limit: 10, what: "file") == Array("x".utf8))
        }
        #expect(identity(raw)?[1] != UInt64(expected))
        #expect(throws: SystemCallFailure.self) { _ = try Paths.open(directory.file("absent"), O_RDONLY | O_CLOEXEC) }
        // Opened beneath a folder through a link: refused, and the folders walked are closed.
        try FileManager.default.createDirectory(atPath: directory.file("sub"), withIntermediateDirectories: false)
        symlink(directory.path, directory.file("sub/link"))
        let tree = try Paths.open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let before = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        for _ in 0..<50 { _ = try? Paths.open("sub/link/f", beneath: tree.descriptor, useOpenat2: false) }
        let after = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        #expect(after <= before + 8, "descriptors leak: \(before) then \(after)")
    }
}
