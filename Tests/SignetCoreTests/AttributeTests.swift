import Foundation
import Testing
@testable import SignetCore
import SignetTestSupport

@Suite("Attribute wrappers on descriptors")
struct AttributeTests {
    @Test("set, get (growing past the first buffer on ERANGE), list, remove; absent is nil")
    func roundTrip() throws {
        let directory = try TemporaryDirectory()
        let file = try InputFile.open(try directory.write("f", Data("x".utf8)), what: "file", followSymlinks: false)
        let fd = file.descriptor
        #expect(try ExtendedAttributes.get("user.absent", on: fd).get() == nil, "ENODATA is absent, not an error")
        let large = (0..<3000).map { UInt8(truncatingIfNeeded: $0) } // larger than the first 1 KiB buffer
        try ExtendedAttributes.set("user.big", large, on: fd).get()
        try ExtendedAttributes.set("user.small", [1, 2, 3], on: fd).get()
        #expect(try ExtendedAttributes.get("user.big", on: fd).get() == large)
        // The real getfattr sees what was written through the descriptor.
        let seen = try run("getfattr", ["--only-values", "-n", "user.small", directory.file("f")]).stdout
        #expect(Array(seen) == [1, 2, 3])
        let names = try ExtendedAttributes.list(on: fd).get()
        #expect(names.contains("user.big") && names.contains("user.small"))
        try ExtendedAttributes.remove("user.big", on: fd).get()
        try ExtendedAttributes.remove("user.big", on: fd).get() // removing again is fine
        #expect(try ExtendedAttributes.get("user.big", on: fd).get() == nil)
        #expect(try !ExtendedAttributes.list(on: fd).get().contains("user.big"))
    }

    @Test("errors: no room, and what they map to")
    func errors() throws {
        let directory = try TemporaryDirectory()
        let file = try InputFile.open(try directory.write("f", Data()), what: "file", followSymlinks: false)
        // Far beyond what any filesystem keeps for one attribute (XATTR_SIZE_MAX is 64 KiB).
        let tooLarge = [UInt8](repeating: 7, count: 70_000)
        guard case .failure(let failure) = ExtendedAttributes.set("user.huge", tooLarge, on: file.descriptor) else {
            Issue.record("a 70,000-byte attribute was accepted")
            return
        }
        #expect(failure.isNoRoom, "errno \(failure.errno)")
        let error = failure.error("set", attribute: "user.huge", path: "f")
        #expect(error.code.exitStatus.rawValue == 5)
        #expect(error.reason.contains("no room"))
        #expect(error.call == "fsetxattr", "the error names the failing call")
        #expect(error.systemError == failure.code)
        #expect(SystemCallFailure("fsetxattr", code: ENOTSUP).error("set", attribute: "user.x", path: "f").reason.contains("no user extended attributes"))
    }
}
